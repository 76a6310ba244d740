//! prober as a drop-in for blackbox_exporter, side by side with the real
//! one (Debian's prometheus-blackbox-exporter, 0.23): the same
//! blackbox.yml, the same targets (prober's responders, dnsmasq, a banner
//! server, a closed port), and for each module and target the same
//! `probe_success`, every metric blackbox emits emitted by prober with
//! the same labels, and durations that agree. Then a real Prometheus
//! scrapes both through blackbox's relabelling, and a standard blackbox
//! alert fires for the same targets on both.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::daemon::free_port;
use crate::support::{Dnsmasq, Files, Serve, closed_port, free_udp_port, require_tools};

const BLACKBOX: &str = "prometheus-blackbox-exporter";

fn port_of(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(_, p)| p)
}

/// A child process killed on drop.
struct KilledOnDrop(Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to 10 s for `url` to answer, for a server `what` just started.
fn wait_until_answering(url: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(url).is_none() {
        assert!(Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The real exporter with `config` on a free loopback port; killed on drop.
struct Exporter {
    _child: KilledOnDrop,
    port: u16,
}

impl Exporter {
    fn start(config: &str) -> Self {
        let port = free_port();
        let child = Command::new(BLACKBOX)
            .arg(format!("--config.file={config}"))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("blackbox_exporter starts");
        let e = Self {
            _child: KilledOnDrop(child),
            port,
        };
        wait_until_answering(
            &format!("http://127.0.0.1:{port}/metrics"),
            "blackbox_exporter",
        );
        e
    }
}

/// nginx in the foreground on a free loopback port, serving `index.html`
/// and a redirect to it, its files and logs in `files`; killed on drop.
/// One process (`master_process off`): a master killed on drop would
/// leave its worker behind.
struct Nginx {
    _child: KilledOnDrop,
    addr: String,
}

impl Nginx {
    fn start(files: &Files) -> Self {
        let port = free_port();
        let dir = files.path("nginx");
        std::fs::create_dir_all(format!("{dir}/www")).unwrap();
        std::fs::write(format!("{dir}/www/index.html"), "hello from nginx\n").unwrap();
        let conf = files.write(
            "nginx.conf",
            &format!(
                "master_process off;\nworker_processes 1;\nerror_log {dir}/error.log;\npid {dir}/nginx.pid;\nevents {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n  fastcgi_temp_path {dir}/fastcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n  server {{\n    listen 127.0.0.1:{port};\n    root {dir}/www;\n    location = /moved {{ return 302 /index.html; }}\n  }}\n}}\n"
            ),
        );
        let child = Command::new("nginx")
            .args(["-p", &dir, "-c", &conf, "-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let n = Self {
            _child: KilledOnDrop(child),
            addr: format!("127.0.0.1:{port}"),
        };
        wait_until_answering(&format!("http://{}/index.html", n.addr), "nginx");
        n
    }
}

/// A body by GET, whatever the status (`None`: no answer).
fn get(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The status code of a GET.
fn status(url: &str) -> u16 {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
            url,
        ])
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}

/// The samples of a text exposition: `name{labels}` to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// A line server that greets as an SSH server does and reads one line
/// back, for `query_response`; on its own thread for the test's life.
fn banner_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut w = conn.try_clone().unwrap();
                let _ = w.write_all(b"SSH-2.0-OpenSSH_9.2 test\r\n");
                let mut line = String::new();
                let _ = BufReader::new(conn).read_line(&mut line);
            });
        }
    });
    port
}

const MODULES: &str = r#"modules:
  http_2xx:
    prober: http
    timeout: 3s
    http:
      preferred_ip_protocol: ip4
  http_tls:
    prober: http
    timeout: 3s
    http:
      preferred_ip_protocol: ip4
      fail_if_not_ssl: true
      tls_config:
        ca_file: ca.pem
  http_404:
    prober: http
    timeout: 3s
    http:
      valid_status_codes: [404]
  http_post:
    prober: http
    timeout: 3s
    http:
      method: POST
      body: '{"a":1}'
      headers:
        Content-Type: application/json
  http_body:
    prober: http
    timeout: 3s
    http:
      fail_if_body_not_matches_regexp: ["^x+$"]
  http_body_bad:
    prober: http
    timeout: 3s
    http:
      fail_if_body_matches_regexp: ["x{10}"]
  http_no_redirects:
    prober: http
    timeout: 3s
    http:
      no_follow_redirects: true
  tcp_connect:
    prober: tcp
    timeout: 3s
  tcp_tls:
    prober: tcp
    timeout: 3s
    tcp:
      preferred_ip_protocol: ip4
      tls: true
      tls_config:
        ca_file: ca.pem
  ssh_banner:
    prober: tcp
    timeout: 3s
    tcp:
      query_response:
      - expect: "^SSH-2.0-([^ ]+)"
      - send: "SSH-2.0-check ${1}"
  wrong_banner:
    prober: tcp
    timeout: 3s
    tcp:
      query_response:
      - expect: "^220 "
  icmp:
    prober: icmp
    timeout: 3s
    icmp:
      preferred_ip_protocol: ip4
  dns_a:
    prober: dns
    timeout: 3s
    dns:
      query_name: www.lab.test
      query_type: A
      validate_answer_rrs:
        fail_if_none_matches_regexp: ["192\\.0\\.2\\.7"]
  dns_nxdomain:
    prober: dns
    timeout: 3s
    dns:
      query_name: gone.lab.test
      query_type: A
      valid_rcodes: [NXDOMAIN]
  dns_tcp:
    prober: dns
    timeout: 3s
    dns:
      transport_protocol: tcp
      query_name: www.lab.test
      query_type: A
  grpc_plain:
    prober: grpc
    timeout: 3s
    grpc:
      tls: false
      preferred_ip_protocol: ip4
"#;

/// Names blackbox emits for a module that prober does not, with why
/// (docs/blackbox.md, "What differs").
const NOT_EMITTED: &[(&str, &str)] = &[
    (
        "probe_ssl_last_chain_info",
        "prober's HTTP probe keeps the leaf's expiry, not the chain's fingerprint and names",
    ),
    (
        "probe_tls_version_info",
        "prober's HTTP probe does not report the TLS version it settled",
    ),
];

/// How far apart the two `probe_duration_seconds` may be. Both are a
/// loopback exchange and its set-up (a few ms at most), or a timeout both
/// wait out alike; a gap this large would mean one waited for something
/// the other did not (a retry, a second connection, a lookup), which is
/// what the check is for. It stays far above the scheduling noise of a
/// loaded 2-core machine.
const DURATION_GAP: f64 = 0.25;

#[test]
fn probe_answers_as_blackbox_exporter_does_side_by_side() {
    if !require_tools(
        &[BLACKBOX, "dnsmasq", "curl", "prometheus", "nginx"],
        "side-by-side test (.ci/run installs prometheus-blackbox-exporter, dnsmasq-base, curl, prometheus, nginx)",
    ) {
        return;
    }
    let icmp = crate::support::is_root();
    if !icmp {
        prober_core::testutil::skip("the icmp module (blackbox's ICMP needs a raw socket: root)");
    }
    let files = Files::new("blackbox-side");
    crate::support::make_pki(&files, &[("server", crate::support::Leaf::Server)]);
    let config = files.path("blackbox.yml");
    // An absolute CA path: blackbox_exporter reads relative ones from its
    // working directory, prober from the file's.
    std::fs::write(&config, MODULES.replace("ca.pem", &files.path("ca.pem"))).unwrap();
    let dns_port = free_udp_port();
    let _dns = Dnsmasq::start(
        dns_port,
        &files,
        &[
            "--address=/www.lab.test/192.0.2.7".to_owned(),
            "--local=/lab.test/".to_owned(),
        ],
    );
    let responders = Serve::start(
        &[
            "--quiet",
            "--http",
            "127.0.0.1:0",
            "--tcp",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
        ],
        3,
    );
    let (cert, key) = (files.path("server.pem"), files.path("server.key"));
    let tls_responder = Serve::start(
        &[
            "--quiet",
            "--https",
            "127.0.0.1:0",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ],
        1,
    );
    let (http, https, tcp, grpc) = (
        responders.addr("http").to_owned(),
        tls_responder.addr("https").to_owned(),
        responders.addr("tcp").to_owned(),
        responders.addr("grpc").to_owned(),
    );
    let nginx = Nginx::start(&files);
    let web = nginx.addr.clone();
    let banner = format!("127.0.0.1:{}", banner_server());
    let closed = format!("127.0.0.1:{}", closed_port());
    let dns = format!("127.0.0.1:{dns_port}");
    let exporter = Exporter::start(&config);
    let prober = Serve::start(
        &["--metrics", "127.0.0.1:0", "--blackbox-config", &config],
        1,
    );
    let prober_at = prober.addr("metrics").to_owned();
    let mut cases: Vec<(&str, String, bool)> = vec![
        ("http_2xx", format!("http://{http}/echo"), true),
        ("http_2xx", format!("http://{http}/status/404"), false),
        ("http_2xx", format!("http://{http}/redirect/2"), true),
        ("http_2xx", format!("{http}/echo"), true),
        ("http_2xx", format!("http://{closed}/"), false),
        ("http_404", format!("http://{http}/status/404"), true),
        ("http_2xx", format!("http://{web}/index.html"), true),
        ("http_2xx", format!("http://{web}/missing"), false),
        ("http_2xx", format!("http://{web}/moved"), true),
        ("http_404", format!("http://{web}/missing"), true),
        ("http_no_redirects", format!("http://{web}/moved"), false),
        ("tcp_connect", web.clone(), true),
        (
            "http_tls",
            format!("https://localhost:{}/echo", port_of(&https)),
            true,
        ),
        ("http_tls", format!("http://{http}/echo"), false),
        ("http_post", format!("http://{http}/echo"), true),
        ("http_body", format!("http://{http}/echo"), true),
        ("http_body", format!("http://{http}/status/200"), false),
        ("http_body_bad", format!("http://{http}/echo"), false),
        (
            "http_no_redirects",
            format!("http://{http}/redirect/1"),
            false,
        ),
        ("tcp_connect", tcp.clone(), true),
        ("tcp_connect", closed.clone(), false),
        ("ssh_banner", banner.clone(), true),
        ("tcp_tls", format!("localhost:{}", port_of(&https)), true),
        ("tcp_tls", tcp.clone(), false),
        ("wrong_banner", banner.clone(), false),
        ("dns_a", dns.clone(), true),
        ("dns_nxdomain", dns.clone(), true),
        ("dns_tcp", dns.clone(), true),
        ("dns_a", closed.clone(), false),
        ("grpc_plain", grpc.clone(), true),
        ("grpc_plain", closed.clone(), false),
    ];
    if icmp {
        cases.push(("icmp", "127.0.0.1".to_owned(), true));
    }
    let mut failures = Vec::new();
    for (module, target, success) in &cases {
        let q = format!("probe?module={module}&target={target}");
        let theirs = samples(&get(&format!("http://127.0.0.1:{}/{q}", exporter.port)).unwrap());
        let ours_text = get(&format!("http://{prober_at}/{q}")).unwrap();
        let ours = samples(&ours_text);
        let case = format!("{module} {target}");
        let want = f64::from(u8::from(*success));
        if theirs.get("probe_success") != Some(&want) {
            failures.push(format!(
                "{case}: blackbox_exporter's probe_success is {:?}, not {want} (the case is wrong)",
                theirs.get("probe_success")
            ));
        }
        if ours.get("probe_success") != Some(&want) {
            failures.push(format!(
                "{case}: prober's probe_success is {:?}, blackbox's {want}\n{}",
                ours.get("probe_success"),
                get(&format!("http://{prober_at}/{q}&debug=true")).unwrap_or_default()
            ));
        }
        let ours_names: BTreeSet<&str> = ours.keys().map(String::as_str).collect();
        for series in theirs.keys() {
            let name = series.split('{').next().unwrap();
            if NOT_EMITTED.iter().any(|(n, _)| *n == name) {
                continue;
            }
            if !ours_names.contains(series.as_str()) {
                failures.push(format!("{case}: blackbox emits {series}, prober does not"));
            }
        }
        let (a, b) = (
            theirs
                .get("probe_duration_seconds")
                .copied()
                .unwrap_or(f64::NAN),
            ours.get("probe_duration_seconds")
                .copied()
                .unwrap_or(f64::NAN),
        );
        // blackbox's DNS socket is connected, so the ICMP port unreachable
        // of a closed port ends its query at once; prober's is not (it
        // counts replies from other sources), so it waits out its
        // timeout. Both fail the probe (docs/blackbox.md).
        let dns_to_closed = module.starts_with("dns") && target == &closed;
        let apart = (a - b).abs();
        if !dns_to_closed && (apart.is_nan() || apart > DURATION_GAP) {
            failures.push(format!(
                "{case}: probe_duration_seconds {b} against blackbox's {a}"
            ));
        }
        // Where both saw the reply's status, they agree on it.
        for same in [
            "probe_http_status_code",
            "probe_http_redirects",
            "probe_http_last_modified_timestamp_seconds",
            "probe_http_content_length",
            "probe_http_version",
            "probe_http_ssl",
            "probe_dns_authority_rrs",
            "probe_dns_additional_rrs",
            "probe_icmp_reply_hop_limit",
            "probe_dns_answer_rrs",
            "probe_grpc_status_code",
            "probe_ip_protocol",
            "probe_ip_addr_hash",
            "probe_failed_due_to_regex",
        ] {
            if let (Some(x), Some(y)) = (theirs.get(same), ours.get(same))
                && x != y
            {
                failures.push(format!("{case}: {same} is {y}, blackbox's {x}"));
            }
        }
    }
    // A module prober does not load answers 400 with its reason.
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
    prometheus_alerts_alike(exporter.port, &prober_at, &http, &closed);
    drop(prober);
}

/// A real Prometheus scrapes both through blackbox's README relabelling;
/// `probe_success` is the same for each target, and the standard
/// blackbox alert (`probe_success == 0`) fires for the same target on
/// both.
fn prometheus_alerts_alike(exporter: u16, prober: &str, http: &str, closed: &str) {
    let files = Files::new("blackbox-prom");
    let port = free_port();
    let targets = format!("[\"http://{http}/echo\", \"http://{closed}/\"]");
    let job = |name: &str, at: &str| {
        format!(
            "  - job_name: {name}\n    metrics_path: /probe\n    params:\n      module: [http_2xx]\n    static_configs:\n      - targets: {targets}\n    relabel_configs:\n      - source_labels: [__address__]\n        target_label: __param_target\n      - source_labels: [__param_target]\n        target_label: instance\n      - target_label: __address__\n        replacement: {at}\n"
        )
    };
    std::fs::write(
        files.path("rules.yml"),
        "groups:\n  - name: blackbox\n    rules:\n      - alert: EndpointDown\n        expr: probe_success == 0\n        for: 0s\n",
    )
    .unwrap();
    std::fs::write(
        files.path("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [\"{}\"]\nscrape_configs:\n{}{}",
            files.path("rules.yml"),
            job("blackbox", &format!("127.0.0.1:{exporter}")),
            job("prober", prober),
        ),
    )
    .unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", files.path("prometheus.yml")))
        .arg(format!("--storage.tsdb.path={}", files.path("data")))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let query = |q: &str| -> Vec<Value> {
        let url = format!("http://127.0.0.1:{port}/api/v1/query?query={q}");
        get(&url)
            .and_then(|b| serde_json::from_str::<Value>(&b).ok())
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    };
    let by = |r: &[Value]| -> BTreeSet<(String, String, String)> {
        r.iter()
            .map(|s| {
                (
                    s["metric"]["job"].as_str().unwrap_or("").to_owned(),
                    s["metric"]["instance"].as_str().unwrap_or("").to_owned(),
                    s["value"][1].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (success, alerts) = loop {
        std::thread::sleep(Duration::from_millis(500));
        let success = query("probe_success");
        let alerts =
            query("ALERTS%7Balertname%3D%22EndpointDown%22%2Calertstate%3D%22firing%22%7D");
        if success.len() == 4 && alerts.len() == 2 {
            break (by(&success), alerts);
        }
        if Instant::now() > deadline {
            let _ = prom.kill();
            panic!("prometheus had {success:?} and alerts {alerts:?} after 60 s");
        }
    };
    // probe_duration_seconds, the panel query, has a series per job and
    // target too.
    let durations = query("probe_duration_seconds").len();
    let _ = prom.kill();
    let _ = prom.wait();
    assert_eq!(durations, 4);
    let ok = format!("http://{http}/echo");
    let down = format!("http://{closed}/");
    for job in ["blackbox", "prober"] {
        assert!(
            success.contains(&(job.to_owned(), ok.clone(), "1".to_owned())),
            "{success:?}"
        );
        assert!(
            success.contains(&(job.to_owned(), down.clone(), "0".to_owned())),
            "{success:?}"
        );
    }
    for a in &alerts {
        assert_eq!(a["metric"]["instance"], down.as_str(), "{alerts:?}");
    }
}

/// Each YAML that blackbox_exporter refuses at load, prober refuses
/// (exit 2), and each it accepts, prober accepts; a module prober cannot
/// honour is named with its field.
#[test]
fn blackbox_configs_are_refused_as_blackbox_exporter_refuses_them() {
    if !require_tools(
        &[BLACKBOX],
        "config check against blackbox_exporter (.ci/run installs it)",
    ) {
        return;
    }
    let files = Files::new("blackbox-check");
    let cases = [
        "    prober: icmp\n    icmp:\n      ttl: -1",
        "    prober: icmp\n    icmp:\n      ttl: 256",
        "    prober: icmp\n    icmp:\n      ttl: 5",
        "    prober: dns\n    dns:\n      query_name: x\n      query_type: BOGUS",
        "    prober: dns\n    dns:\n      query_name: x\n      query_class: XX",
        "    prober: dns\n    dns:\n      query_name: x\n      valid_rcodes: [BOGUS]",
        "    prober: http\n    http:\n      basic_auth: {username: a, password: b, password_file: c}",
        "    prober: http\n    http:\n      bearer_token: a\n      bearer_token_file: c",
        "    prober: http\n    http:\n      bearer_token: a\n      basic_auth: {username: a}",
        "    prober: http\n    http:\n      fail_if_body_matches_regexp: ['(']",
        "    prober: http\n    http:\n      bogus: 1",
        "    prober: http\n    timeout: 5x",
        "    prober: http\n    timeout: 1m30s",
        "    prober: websocket",
        "    prober: http\n    http:\n      body_size_limit: 10MB",
        "    prober: http\n    http:\n      body_size_limit: 10XB",
        "    prober: http\n    http:\n      compression: gzip\n      headers: {Accept-Encoding: br}",
        "    prober: http\n    http:\n      fail_if_header_matches: [{regexp: x}]",
        "    prober: http\n    http:\n      fail_if_header_matches: [{header: x}]",
        "    prober: tcp\n    tcp:\n      query_response: [{expect: '('}]",
        "    prober: tcp\n    tcp:\n      query_response: [{bogus: x}]",
        "    prober: grpc\n    grpc:\n      tls_config: {min_version: TLS99}",
        "    prober: http\n    http:\n      headers: {A: [b]}",
        "    prober: http\n    http:\n      proxy_url: '::bad'",
        "    prober: http\n    http:\n      valid_status_codes: ['2xx']",
        "    prober: http\n    http:\n      tls_config: {ca: x}",
        "    prober: http\n    http:\n      enable_http2: false",
        "    prober: http\n    http:\n      oauth2: {client_id: a, token_url: 'http://x'}",
        "    prober: grpc\n    grpc:\n      source_ip_address: 1.2.3.4",
        "    prober: tcp\n    tcp:\n      source_ip_address: 127.0.0.1\n      tls: true",
        "    prober: dns\n    dns:\n      query_name: a\n      recursion_desired: false",
    ];
    let mut wrong = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let path = files.path(&format!("case{i}.yml"));
        std::fs::write(&path, format!("modules:\n  m:\n{case}\n")).unwrap();
        let theirs = Command::new(BLACKBOX)
            .args(["--config.check", &format!("--config.file={path}")])
            .output()
            .unwrap();
        let ours = crate::support::run(&["serve", "--check-config", "--blackbox-config", &path]);
        let err = String::from_utf8_lossy(&ours.stderr);
        let accepted = theirs.status.success();
        let want = if accepted { Some(0) } else { Some(2) };
        if ours.status.code() != want {
            wrong.push(format!(
                "{case:?}: blackbox {}, prober exit {:?}: {err}",
                if accepted { "accepts" } else { "refuses" },
                ours.status.code()
            ));
        }
        if !accepted {
            let lines: Vec<&str> = err.lines().collect();
            assert_eq!(lines.len(), 1, "one line for {case:?}: {err}");
            assert!(
                err.contains("blackbox config")
                    && (err.contains("module m") || err.contains("modules.m")),
                "{err}"
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Debian's example config loads; the modules prober does not honour are
/// exactly those of docs/blackbox.md's table, each named with its field;
/// `--strict` makes them an error.
#[test]
fn the_debian_example_config_loads_with_its_refusals_named() {
    let example = "/usr/share/doc/prometheus-blackbox-exporter/examples/example.yml";
    if !require_tools(
        &[BLACKBOX],
        "the example config ships with prometheus-blackbox-exporter",
    ) {
        return;
    }
    let out = crate::support::run(&["serve", "--check-config", "--blackbox-config", example]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("11 modules loaded, 5 not"), "{stdout}");
    let refused: BTreeSet<(&str, &str)> = err
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("prober: warning: blackbox module ")?;
            let (module, why) = rest.split_once(" is not loaded: field ")?;
            Some((module, why.split(':').next()?))
        })
        .collect();
    let want: BTreeSet<(&str, &str)> = [
        (
            "dns_udp_example",
            "modules.dns_udp_example.dns.validate_answer_rrs.fail_if_matches_regexp",
        ),
        (
            "http_2xx_example",
            "modules.http_2xx_example.http.fail_if_header_matches",
        ),
        ("http_gzip", "modules.http_gzip.http.compression"),
        (
            "http_gzip_with_accept_encoding",
            "modules.http_gzip_with_accept_encoding.http.compression",
        ),
        ("http_with_proxy", "modules.http_with_proxy.http.proxy_url"),
    ]
    .into_iter()
    .collect();
    assert_eq!(refused, want, "{err}");
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/blackbox.md"
    ))
    .expect("docs/blackbox.md");
    for (_, field) in &want {
        let key = field
            .rsplit_once(".http.")
            .or_else(|| field.rsplit_once(".dns."))
            .unwrap()
            .1;
        assert!(
            docs.contains(&format!("`{key}`")),
            "docs/blackbox.md names {key}"
        );
    }
    let strict = crate::support::run(&[
        "serve",
        "--check-config",
        "--strict",
        "--blackbox-config",
        example,
    ]);
    assert_eq!(strict.status.code(), Some(2));
}

/// `/probe`'s refusals: a missing target, an unknown module, a module not
/// loaded (with its reason), a bad scrape timeout (400); a target outside
/// `allowed_targets` (403, and never probed); a non-loopback listener
/// without `allowed_targets` refuses to start.
#[test]
fn probe_refuses_what_it_should() {
    let files = Files::new("blackbox-refuse");
    let bb = files.path("blackbox.yml");
    std::fs::write(
        &bb,
        "modules:\n  tcp_connect:\n    prober: tcp\n    timeout: 2s\n  gz:\n    prober: http\n    http:\n      compression: gzip\n  http_2xx:\n    prober: http\n    timeout: 2s\n",
    )
    .unwrap();
    let toml = files.path("prober.toml");
    std::fs::write(
        &toml,
        format!(
            "allow_empty = true\n[metrics]\nlisten = \"127.0.0.1:0\"\n[blackbox]\nconfig = \"{bb}\"\nallowed_targets = [\"127.0.0.2/32\", \"*.allowed.test\"]\n"
        ),
    )
    .unwrap();
    // A listener that answers, to see that a refused target is not probed.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let open = l.local_addr().unwrap().port();
    let d = Serve::start(&["--config", &toml], 1);
    let at = d.addr("metrics").to_owned();
    // With a list, a redirect is not followed: it could lead outside it.
    let web = Serve::start(&["--quiet", "--http", "127.0.0.2:0"], 1);
    let redirect = format!(
        "http://{}/probe?module=http_2xx&target=http://{}/redirect/1&debug=true",
        at,
        web.addr("http")
    );
    let log = get(&redirect).unwrap();
    assert!(
        log.contains("Redirects are not followed") && log.contains("probe_http_status_code 302"),
        "{log}"
    );
    let url = |q: &str| format!("http://{at}/probe?{q}");
    assert_eq!(status(&url("module=tcp_connect")), 400);
    assert!(
        get(&url("module=tcp_connect"))
            .unwrap()
            .contains("Target parameter is missing")
    );
    assert_eq!(status(&url("module=nope&target=127.0.0.2:1")), 400);
    let gz = get(&url("module=gz&target=127.0.0.2:1")).unwrap();
    assert!(gz.contains("compression"), "{gz}");
    assert_eq!(
        status(
            &url("module=tcp_connect&target=127.0.0.1:{open}").replace("{open}", &open.to_string())
        ),
        403
    );
    let why = get(&url(&format!("module=tcp_connect&target=127.0.0.1:{open}"))).unwrap();
    assert!(why.contains("allowed_targets"), "{why}");
    assert!(l.accept().is_err(), "a refused target was connected to");
    assert_eq!(status(&url("module=tcp_connect&target=127.0.0.2:1")), 200);
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "X-Prometheus-Scrape-Timeout-Seconds: soon",
        ])
        .arg(url("module=tcp_connect&target=127.0.0.2:1"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "400");
    drop(d);
    // Not loopback, no allowed_targets: refused at start, with the reason.
    std::fs::write(
        &toml,
        format!(
            "allow_empty = true\n[metrics]\nlisten = \"0.0.0.0:0\"\n[blackbox]\nconfig = \"{bb}\"\n"
        ),
    )
    .unwrap();
    let out = crate::support::run(&["serve", "--config", &toml]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("allowed_targets") && err.lines().count() == 1,
        "{err}"
    );
}

/// The metrics listener over mutual TLS, as the exporter-toolkit web
/// config sets it: a client without a certificate, or speaking plain
/// HTTP, gets nothing; one with a certificate the CA signed gets
/// `/metrics` and `/probe`; a real Prometheus scrapes `/probe` over mTLS.
#[test]
fn the_metrics_listener_speaks_mutual_tls_to_a_real_prometheus() {
    if !require_tools(
        &["curl", "prometheus"],
        "mTLS scrape test (.ci/run installs curl and prometheus)",
    ) {
        return;
    }
    let files = Files::new("blackbox-mtls");
    crate::support::make_pki(
        &files,
        &[
            ("server", crate::support::Leaf::Server),
            ("client", crate::support::Leaf::Client),
        ],
    );
    let bb = files.write(
        "blackbox.yml",
        "modules:\n  tcp_connect:\n    prober: tcp\n    timeout: 2s\n",
    );
    let web = files.write(
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_ca_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n  min_version: TLS12\n",
            files.path("server.pem"),
            files.path("server.key"),
            files.path("ca.pem"),
        ),
    );
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open_at = open.local_addr().unwrap().to_string();
    let d = Serve::start(
        &[
            "--metrics",
            "127.0.0.1:0",
            "--blackbox-config",
            &bb,
            "--web-config",
            &web,
        ],
        1,
    );
    let at = d.addr("metrics").to_owned();
    let port = at.rsplit_once(':').unwrap().1.to_owned();
    let curl = |extra: &[&str], url: &str| -> (bool, String) {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "5", "--cacert", &files.path("ca.pem")])
            .args(extra)
            .arg(url)
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let https = format!("https://localhost:{port}");
    let resolve = format!("localhost:{port}:127.0.0.1");
    let with_cert = [
        "--resolve",
        &resolve,
        "--cert",
        &files.path("client.pem"),
        "--key",
        &files.path("client.key"),
    ];
    let (ok, body) = curl(&with_cert, &format!("{https}/metrics"));
    assert!(ok && body.contains("prober_build_info"), "{body}");
    let (ok, body) = curl(
        &with_cert,
        &format!("{https}/probe?module=tcp_connect&target={open_at}"),
    );
    assert!(ok && body.contains("probe_success 1"), "{body}");
    let (ok, _) = curl(&["--resolve", &resolve], &format!("{https}/metrics"));
    assert!(!ok, "a client without a certificate was served");
    let (ok, _) = curl(&[], &format!("http://{at}/metrics"));
    assert!(!ok, "plain HTTP was served");
    // A real Prometheus, over mTLS, through blackbox's relabelling.
    let prom_port = free_port();
    std::fs::write(
        files.path("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mtls\n    scheme: https\n    metrics_path: /probe\n    params:\n      module: [tcp_connect]\n    tls_config:\n      ca_file: {ca}\n      cert_file: {cert}\n      key_file: {key}\n      server_name: localhost\n    static_configs:\n      - targets: [\"{open_at}\"]\n    relabel_configs:\n      - source_labels: [__address__]\n        target_label: __param_target\n      - source_labels: [__param_target]\n        target_label: instance\n      - target_label: __address__\n        replacement: {at}\n",
            ca = files.path("ca.pem"),
            cert = files.path("client.pem"),
            key = files.path("client.key"),
        ),
    )
    .unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", files.path("prometheus.yml")))
        .arg(format!("--storage.tsdb.path={}", files.path("data")))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    let up = loop {
        std::thread::sleep(Duration::from_millis(500));
        let r = get(&format!(
            "http://127.0.0.1:{prom_port}/api/v1/query?query=probe_success%7Bjob%3D%22mtls%22%7D"
        ))
        .and_then(|b| serde_json::from_str::<Value>(&b).ok())
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default();
        if let Some(s) = r.first() {
            break s["value"][1].as_str().unwrap_or("").to_owned();
        }
        if Instant::now() > deadline {
            let _ = prom.kill();
            panic!("prometheus never scraped /probe over mTLS");
        }
    };
    let _ = prom.kill();
    let _ = prom.wait();
    assert_eq!(up, "1");
    drop(open);
}

/// SIGHUP reloads the modules; a file that does not load leaves the old
/// ones serving. `&debug=true` answers with the probe's log and metrics.
#[test]
fn sighup_reloads_the_modules_and_debug_shows_the_log() {
    let files = Files::new("blackbox-reload");
    let bb = files.write(
        "blackbox.yml",
        "modules:\n  a:\n    prober: tcp\n    timeout: 2s\n",
    );
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = open.local_addr().unwrap().to_string();
    let d = Serve::start(&["--metrics", "127.0.0.1:0", "--blackbox-config", &bb], 1);
    let at = d.addr("metrics").to_owned();
    let url = |m: &str| format!("http://{at}/probe?module={m}&target={target}");
    assert_eq!(status(&url("a")), 200);
    assert_eq!(status(&url("b")), 400);
    let debug = get(&format!("{}&debug=true", url("a"))).unwrap();
    assert!(
        debug.starts_with("Logs for the probe:")
            && debug.contains("Metrics that would have been returned:")
            && debug.contains("probe_success 1"),
        "{debug}"
    );
    let reload_until = |want: u16| {
        crate::support::signal(d.child.id(), "HUP");
        let deadline = Instant::now() + Duration::from_secs(10);
        while status(&url("b")) != want {
            assert!(Instant::now() < deadline, "module b never answered {want}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    files.write(
        "blackbox.yml",
        "modules:\n  a:\n    prober: tcp\n  b:\n    prober: tcp\n",
    );
    reload_until(200);
    // A file blackbox would refuse: the old modules stay.
    files.write(
        "blackbox.yml",
        "modules:\n  b:\n    prober: icmp\n    icmp:\n      ttl: -1\n",
    );
    crate::support::signal(d.child.id(), "HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(status(&url("a")), 200);
    assert_eq!(status(&url("b")), 200);
    let err = d.stop();
    assert!(
        err.contains("blackbox config rejected") && err.contains("cannot be negative"),
        "{err}"
    );
}
