//! gRPC end to end: `prober run` against `prober serve --grpc`, with TLS and
//! mTLS from files made at test time.

use std::path::Path;

use crate::support::{
    Files, Leaf, Server, json_lines, make_pki, of_type, run, run_json, run_json_ok,
};

#[test]
fn unary_stream_and_health() {
    let srv = Server::start(&[]);
    let g = &srv.grpc;
    let targets = [
        format!("grpc://{g}"),
        format!("grpc+stream://{g}"),
        format!("grpc-health://{g}"),
        format!("grpc-health://{g}/prober.v1.Echo"),
    ];
    // 10 ms apart: a call that overlaps the one before it has no stamps,
    // and under load (a debug build beside other work) calls took 1-4 ms.
    let mut args = vec!["run", "-c", "20", "-i", "10ms", "-o", "json"];
    args.extend(targets.iter().map(String::as_str));
    let lines = run_json_ok(&args);
    let sums = of_type(&lines, "summary");
    for s in &sums {
        assert_eq!(
            (s["sent"].as_u64(), s["ok"].as_u64()),
            (Some(20), Some(20)),
            "{s}"
        );
    }
    assert!(
        sums[0]["server_dwell"]["count"].as_u64() == Some(20),
        "unary reports dwell"
    );
    let probe = of_type(&lines, "probe")
        .into_iter()
        .find(|p| p["protocol"] == "grpc")
        .unwrap()
        .clone();
    assert!(probe["server_dwell_ns"].as_u64().is_some(), "{probe}");
    // A health check has the client's side of the split (any server's
    // health service: no responder stamps, so no network part).
    // A probe whose call overlapped another's has no stamps (docs/
    // timestamps.md); most have.
    let health: Vec<_> = of_type(&lines, "probe")
        .into_iter()
        .filter(|p| p["protocol"] == "grpc-health")
        .collect();
    // A part the stamps do not give is absent: one CI run had a probe with
    // its client wake but no transmit stamp, so no client send.
    let split: Vec<_> = health
        .iter()
        .filter(|p| p["parts"]["client_send_ns"].is_u64() && p["parts"]["client_wake_ns"].is_u64())
        .collect();
    assert!(
        split.len() * 2 >= health.len(),
        "{} of {}",
        split.len(),
        health.len()
    );
    for p in &health {
        assert!(p["parts"].get("network_ns").is_none(), "{p}");
    }
    for p in split {
        let parts = p["parts"].as_object().unwrap();
        let rtt = p["rtt_ns"].as_u64().unwrap();
        let send = parts["client_send_ns"].as_u64().unwrap();
        let wake = parts["client_wake_ns"].as_u64().unwrap();
        let kernel = p["kernel_rtt_ns"].as_u64().expect("kernel rtt");
        assert_eq!(send + kernel + wake, rtt, "{p}");
    }
}

#[test]
fn health_of_an_unknown_service_is_an_error() {
    let srv = Server::start(&[]);
    let t = format!("grpc-health://{}/no.such.Service", srv.grpc);
    let out = run(&["run", "-c", "2", "-i", "2ms", "-o", "json", &t]);
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out);
    assert_eq!(of_type(&lines, "summary")[0]["error"], 2);
}

#[test]
fn deadline_exceeded_counts_as_timeout() {
    let srv = Server::start(&["--grpc-delay", "500ms"]);
    let t = format!("grpc://{}", srv.grpc);
    let out = run(&[
        "run", "-c", "3", "-i", "10ms", "-W", "100ms", "-o", "json", &t,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out);
    let s = &of_type(&lines, "summary")[0];
    assert_eq!(
        (s["timeout"].as_u64(), s["error"].as_u64()),
        (Some(3), Some(0)),
        "{s}"
    );
}

fn grpcs(args: &[&str], target: &str) -> (Option<i32>, String, Vec<serde_json::Value>) {
    let mut all = vec!["run", "-c", "3", "-i", "5ms", "-o", "json"];
    all.extend(args);
    all.push(target);
    let (code, lines, err) = run_json(&all);
    (code, err, lines)
}

fn first_error(lines: &[serde_json::Value]) -> String {
    of_type(lines, "probe")
        .iter()
        .find_map(|p| p["error"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[test]
fn tls_and_mtls_through_the_cli() {
    let f = Files::new("tls-cli");
    make_pki(&f, &[("server", Leaf::Server), ("client", Leaf::Client)]);
    let (cert, key, ca) = (f.path("server.pem"), f.path("server.key"), f.path("ca.pem"));
    let srv = Server::start(&["--tls-cert", &cert, "--tls-key", &key]);
    let t = format!("grpcs://{}", srv.grpc.replace("127.0.0.1", "localhost"));
    let (code, err, lines) = grpcs(&["--ca", &ca], &t);
    assert_eq!(code, Some(0), "{err}");
    let s = of_type(&lines, "summary")[0];
    assert!(
        s["cert_not_after"].as_i64().unwrap() > 1_700_000_000,
        "the server certificate's expiry: {s}"
    );
    // Without the CA the certificate is unknown, and the error says so.
    let (code, _, lines) = grpcs(&[], &t);
    assert_eq!(code, Some(1));
    let e = first_error(&lines);
    assert!(
        e.contains("UnknownIssuer") || e.contains("unknown issuer"),
        "{e}"
    );
    let (code, _, _) = grpcs(&["--insecure"], &t);
    assert_eq!(code, Some(0));
    drop(srv);

    let srv = Server::start(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ]);
    let t = format!("grpcs://{}", srv.grpc.replace("127.0.0.1", "localhost"));
    let (code, err, _) = grpcs(
        &[
            "--ca",
            &ca,
            "--cert",
            &f.path("client.pem"),
            "--key",
            &f.path("client.key"),
        ],
        &t,
    );
    assert_eq!(code, Some(0), "{err}");
    let (code, _, lines) = grpcs(&["--ca", &ca], &t);
    assert_eq!(code, Some(1));
    let e = first_error(&lines).to_lowercase();
    assert!(e.contains("certificate"), "{e}");
}

#[test]
fn bad_tls_files_are_one_line_errors() {
    let f = Files::new("tls-bad");
    let junk = f.write("junk.pem", "not a certificate");
    let t = "grpcs://127.0.0.1:1";
    let (code, err, _) = grpcs(&["--ca", &junk], t);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--ca") && err.contains("holds no PEM CERTIFICATE"),
        "{err}"
    );
    let missing = Path::new(&f.path("missing.pem"))
        .to_str()
        .unwrap()
        .to_owned();
    let (code, err, _) = grpcs(&["--ca", &missing], t);
    assert_eq!(code, Some(2));
    assert!(err.contains("reading --ca"), "{err}");
    let out = run(&[
        "serve",
        "--grpc",
        "127.0.0.1:0",
        "--tls-cert",
        &junk,
        "--tls-key",
        &junk,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert"));
}
