//! `prober localize` against a stand-in for Prometheus's query API that
//! answers with the series a leaf-spine mesh's daemons export (the fleet
//! lab's test runs it against a real Prometheus): the lossy link first and
//! named, nothing named on a healthy mesh, and its errors in one line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use serde_json::{Value, json};

use crate::support::{fails, run};

/// The mesh: 2 spines, 3 leaves, 2 hosts a leaf, 2 flows a pair, each
/// flow on the spine its number picks. Routers answer as the fleet lab's
/// do: a leaf from 10.L.0.1 on the way up, a spine from its end of the
/// link it came in on (10.9.S.L), a leaf on the way down from its end of
/// the spine's link (10.L.S.254).
struct Mesh {
    /// The link from this leaf up to this spine loses this share of what
    /// it carries.
    bad: Option<(u8, u8, f64)>,
}

#[derive(Default)]
struct Series {
    hops: Vec<Value>,
    flows: Vec<Value>,
    sent: Vec<Value>,
    lost: Vec<Value>,
}

impl Mesh {
    fn series(&self) -> Series {
        let mut s = Series {
            hops: Vec::new(),
            flows: Vec::new(),
            sent: Vec::new(),
            lost: Vec::new(),
        };
        let v = |labels: Value, x: f64| json!({"metric": labels, "value": [1.0, x.to_string()]});
        for sl in 1..=3u8 {
            for sh in 1..=2u8 {
                let instance = format!("h{sl}-{sh}");
                let src = format!("10.{sl}.0.{}", 10 + sh);
                for dl in 1..=3u8 {
                    for dh in 1..=2u8 {
                        if (sl, sh) == (dl, dh) {
                            continue;
                        }
                        let dst = format!("10.{dl}.0.{}", 10 + dh);
                        let base = format!("udp://{dst}:8707");
                        let branches: Vec<Vec<String>> = if sl == dl {
                            vec![vec![format!("10.{sl}.0.1"), dst.clone()]]
                        } else {
                            (1..=2u8)
                                .map(|sp| {
                                    vec![
                                        format!("10.{sl}.0.1"),
                                        format!("10.9.{sp}.{sl}"),
                                        format!("10.{dl}.{sp}.254"),
                                        dst.clone(),
                                    ]
                                })
                                .collect()
                        };
                        for (b, hops) in branches.iter().enumerate() {
                            for (h, addr) in hops.iter().enumerate() {
                                s.hops.push(v(
                                    json!({"instance": instance, "probe": "mesh", "target": base,
                                           "path": (b + 1).to_string(), "hop": (h + 1).to_string(), "addr": addr}),
                                    1.0,
                                ));
                            }
                        }
                        for flow in 0..2u8 {
                            let target = format!("{base}#flow={flow}");
                            let spine = 1 + (flow + sh + dh) % 2;
                            let path = if sl == dl { 1 } else { spine };
                            let l =
                                json!({"instance": instance, "probe": "mesh", "target": target});
                            s.flows.push(v(
                                json!({"instance": instance, "probe": "mesh", "target": target,
                                       "path": path.to_string(), "source": src}),
                                1.0,
                            ));
                            let lost = match self.bad {
                                Some((leaf, sp, share))
                                    if sl == leaf && dl != sl && spine == sp =>
                                {
                                    3000.0 * share
                                }
                                _ => 0.0,
                            };
                            s.sent.push(v(l.clone(), 3000.0));
                            s.lost.push(v(l, lost));
                        }
                    }
                }
            }
        }
        s
    }
}

/// Serves `s` as Prometheus's `/api/v1/query` would, for `queries`
/// requests; its URL.
fn stand_in(s: Series, queries: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for _ in 0..queries {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0;
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = n.trim().parse().unwrap();
                }
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            let body = String::from_utf8(body).unwrap();
            // A query at a time Prometheus cannot read, refused as it does.
            if body.contains("time=bad") {
                let answer = r#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"time\": cannot parse \"bad\" to a valid timestamp"}"#;
                let _ = write!(
                    conn,
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                continue;
            }
            let result = if body.contains("prober_path_hop_info") {
                &s.hops
            } else if body.contains("prober_path_flow") {
                &s.flows
            } else if body.contains("prober_probes_sent_total") {
                &s.sent
            } else if body.contains("prober_probes_timeout_total") {
                &s.lost
            } else {
                &Vec::new()
            };
            let answer =
                json!({"status": "success", "data": {"resultType": "vector", "result": result}})
                    .to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    url
}

/// The five queries a localize makes.
const QUERIES: usize = 5;

/// `prober localize` with `args` against a stand-in serving `mesh`'s
/// series: its output, once its exit status is `code`.
fn localize(mesh: Mesh, args: &[&str], code: i32) -> std::process::Output {
    let url = stand_in(mesh.series(), QUERIES);
    let out = run(&[&["localize", "--prometheus", &url][..], args].concat());
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_lossy_link_is_named_first() {
    let lossy = || Mesh {
        bad: Some((2, 1, 0.01)),
    };
    let out = localize(lossy(), &["-o", "json"], 1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["flows"], 60);
    assert_eq!(v["lossy_flows"], 8, "{v}");
    assert_eq!(v["unmapped_flows"], 0);
    let top = &v["links"][0];
    // The way up from leaf 2 to spine 1, as spine 1 answers from leaf 2.
    assert_eq!(top["link"]["from"], "10.2.0.1", "{v:#}");
    assert_eq!(top["link"]["to"], "10.9.1.2", "{v:#}");
    assert_eq!(top["named"], true);
    assert_eq!(top["clean_flows"], 0);
    assert!((top["loss"].as_f64().unwrap() - 0.01).abs() < 1e-9);

    // A look back: the window's end goes to Prometheus as the queries'
    // time, and the report says it.
    let out = localize(lossy(), &["-o", "json", "--at", "1796004125"], 1);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["at"], "1796004125", "{v}");
    fails(
        &[
            "localize",
            "--prometheus",
            &stand_in(lossy().series(), 1),
            "--at",
            "bad",
        ],
        "cannot parse \"bad\"",
    );

    // The table says the same.
    let out = localize(lossy(), &[], 1);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("60 flows over 5m (8 lossy, 0 without a followed path); 1 links named"),
        "{text}"
    );
    let first = text.lines().nth(2).unwrap();
    assert!(
        first.contains("10.2.0.1 > 10.9.1.2") && first.ends_with("yes"),
        "{text}"
    );
}

#[test]
fn a_healthy_mesh_names_nothing() {
    let out = localize(Mesh { bad: None }, &["-o", "json"], 0);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["named"].as_u64(), v["lossy_flows"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
}

#[test]
fn its_errors_are_one_line() {
    // Nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    fails(
        &[
            "localize",
            "--prometheus",
            &format!("http://127.0.0.1:{port}"),
        ],
        "cannot reach Prometheus at",
    );
    fails(
        &["localize", "--prometheus", "https://p:9090"],
        "give http://HOST:PORT",
    );
    fails(
        &[
            "localize",
            "--prometheus",
            "http://127.0.0.1:1",
            "--confidence",
            "100",
        ],
        "not a percentage",
    );
    // A Prometheus with no followed flow: what to turn on.
    fails(
        &[
            "localize",
            "--prometheus",
            &stand_in(Series::default(), QUERIES),
        ],
        "trace_hops = true",
    );
}

/// One HTTP GET of `path` from `addr`: the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let status = text.lines().next().unwrap_or("").to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_owned();
    (status, body)
}

/// `--listen` serves the page and the JSON, each read afresh, another
/// window on asking, a 400 for a window that is not one and a 502 that
/// says why when Prometheus is gone; SIGTERM ends it with 0.
#[test]
fn the_page_and_the_json_are_served() {
    let url = stand_in(
        Mesh {
            bad: Some((2, 1, 0.01)),
        }
        .series(),
        2 * QUERIES,
    );
    let mut child = crate::support::prober()
        .args(["localize", "--prometheus", &url, "--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let (status, body) = get(&addr, "/localize.json");
    assert!(status.contains(" 200 "), "{status}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["type"], "localize");
    assert_eq!(v["links"][0]["link"]["from"], "10.2.0.1", "{v:#}");
    assert_eq!(v["links"][0]["named"], true, "{v:#}");
    let (status, page) = get(&addr, "/?window=15m");
    assert!(status.contains(" 200 "), "{status}");
    assert!(page.contains("60 flows over 15m (8 lossy"), "{page}");
    assert!(
        page.contains("<tr class=named><td>1</td><td>10.2.0.1 &gt; 10.9.1.2</td>"),
        "{page}"
    );
    let (status, body) = get(&addr, "/?window=5x");
    assert!(
        status.contains(" 400 ") && body.contains("not a Prometheus duration"),
        "{status} {body}"
    );
    let (status, _) = get(&addr, "/other");
    assert!(status.contains(" 404 "), "{status}");
    // The stand-in has answered all it will: Prometheus is gone.
    let (status, body) = get(&addr, "/localize.json");
    assert!(status.contains(" 502 "), "{status}");
    assert!(body.contains("cannot reach Prometheus"), "{body}");
    crate::support::sigterm(child.id());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    // An address already taken: one line, exit 2.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    fails(
        &[
            "localize",
            "--prometheus",
            "http://127.0.0.1:1",
            "--listen",
            &taken.local_addr().unwrap().to_string(),
        ],
        "cannot listen",
    );
}
