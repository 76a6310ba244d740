//! DNS discovery (`dns_sd`) against a real DNS server: dnsmasq from the
//! Debian packages, serving A records from a hosts folder it watches and an
//! SRV record, changed while the daemon runs.

use std::time::Duration;

use crate::daemon::{Daemon, series};
use crate::support::Files;

/// dnsmasq on a loopback port: `peers.mesh.lan` from the hosts folder
/// (re-read when a file in it changes), and `_prober._udp.mesh.lan` (SRV)
/// naming `srv.mesh.lan`. Every record has a 1 s TTL. Killed on drop.
struct MeshDns {
    server: Option<crate::support::Dnsmasq>,
    port: u16,
    files: Files,
    srv_port: u16,
}

impl MeshDns {
    fn start(srv_port: u16) -> Option<Self> {
        if !crate::support::have_dnsmasq() {
            return None;
        }
        let files = Files::new("mesh-dns");
        std::fs::create_dir_all(files.path("hosts.d")).unwrap();
        files.write("hosts.d/peers", "");
        // Both families: every address is a target.
        files.write(
            "hosts.d/dual",
            "127.0.0.2 dual.mesh.lan\n::1 dual.mesh.lan\n",
        );
        let mut d = Self {
            server: None,
            port: crate::support::free_udp_port(),
            files,
            srv_port,
        };
        d.restart(None);
        Some(d)
    }

    /// (Re)starts dnsmasq on the same port; with `servfail_upstream`,
    /// `peers.mesh.lan` is forwarded there instead of answered locally.
    fn restart(&mut self, servfail_upstream: Option<u16>) {
        // The old one goes first: the new one takes its port.
        self.server = None;
        let mut args = vec![
            "--local-ttl=1".to_owned(),
            "--host-record=srv.mesh.lan,127.0.0.3".to_owned(),
            format!(
                "--srv-host=_prober._udp.mesh.lan,srv.mesh.lan,{}",
                self.srv_port
            ),
        ];
        match servfail_upstream {
            None => args.push(format!("--hostsdir={}", self.files.path("hosts.d"))),
            Some(up) => args.push(format!("--server=/peers.mesh.lan/127.0.0.1#{up}")),
        }
        self.server = Some(crate::support::Dnsmasq::start(
            self.port,
            &self.files,
            &args,
        ));
    }

    /// Replaces the A records of peers.mesh.lan (dnsmasq sees the change
    /// through inotify).
    fn peers(&self, addrs: &[&str]) {
        let text: String = addrs
            .iter()
            .map(|a| format!("{a} peers.mesh.lan\n"))
            .collect();
        let tmp = self.files.write("peers.tmp", &text);
        std::fs::rename(tmp, self.files.path("hosts.d/peers")).unwrap();
    }
}

/// A mesh job: A and SRV names looked up on their TTL while the daemon
/// runs. Targets come and go without a restart and the others keep their
/// counters; this host's own address is skipped; SERVFAIL keeps the last
/// good set and is counted.
#[test]
fn dns_sd_targets_follow_the_records() {
    let probe_port = crate::daemon::free_port();
    let srv_port = crate::daemon::free_port();
    let Some(mut dns) = MeshDns::start(srv_port) else {
        return;
    };
    // 127.0.0.1 is this host's (lo's) address, 127.0.0.2 is not.
    dns.peers(&["127.0.0.1", "127.0.0.2"]);
    let mut d = Daemon::start(
        "dns-sd",
        &format!(
            r#"
[discovery]
server = "127.0.0.1:{}"
ttl_floor = "1s"

[[job]]
name = "mesh"
interval = "20ms"
timeout = "100ms"
exclude_self = true
dns_sd = ["udp://peers.mesh.lan:{probe_port}", "udp://_prober._udp.mesh.lan"]

[[job]]
name = "dual"
interval = "50ms"
timeout = "100ms"
dns_sd = ["udp://dual.mesh.lan:{probe_port}"]
"#,
            dns.port
        ),
    );
    let sent = |addr: &str, port: u16, name: &str| {
        format!(
            r#"prober_probes_sent_total{{probe="mesh",target="udp://{addr}:{port}",protocol="udp",dns_name="{name}"}}"#
        )
    };
    let (two, three, four) = (
        sent("127.0.0.2", probe_port, "peers.mesh.lan"),
        sent("127.0.0.3", srv_port, "srv.mesh.lan"),
        sent("127.0.0.4", probe_port, "peers.mesh.lan"),
    );
    let own = format!("udp://127.0.0.1:{probe_port}");
    let wait_for =
        |what: &str, ok: &dyn Fn(&str) -> bool| d.scrape_until(what, Duration::from_secs(15), ok);
    let first = wait_for("the A and SRV targets", &|t| {
        series(t, &two).is_some_and(|n| n > 0.0) && series(t, &three).is_some_and(|n| n > 0.0)
    });
    assert!(
        !first.contains(&own),
        "this host's own address is skipped:\n{first}"
    );
    for addr in ["127.0.0.2", "[::1]"] {
        let dual = format!(
            r#"prober_probes_sent_total{{probe="dual",target="udp://{addr}:{probe_port}",protocol="udp",dns_name="dual.mesh.lan"}}"#
        );
        assert!(series(&first, &dual).is_some(), "{dual}:\n{first}");
    }
    assert_eq!(
        series(&first, r#"prober_discovery_targets{probe="mesh"}"#),
        Some(2.0),
        "{first}"
    );
    // A record added and one removed, at the next lookup (1 s TTL).
    dns.peers(&["127.0.0.1", "127.0.0.4"]);
    let moved = wait_for("127.0.0.4 in and 127.0.0.2 out", &|t| {
        series(t, &four).is_some() && series(t, &two).is_none()
    });
    assert!(
        series(&moved, &three).unwrap() > series(&first, &three).unwrap(),
        "the SRV target kept its counters across the change"
    );
    // SERVFAIL for the A name: the last good set runs on, counted.
    dns.restart(Some(crate::support::servfail_upstream()));
    let failing = wait_for("a counted discovery failure", &|t| {
        series(t, r#"prober_discovery_failures_total{probe="mesh"}"#).is_some_and(|n| n >= 1.0)
    });
    std::thread::sleep(Duration::from_millis(1500));
    let later = d.scrape();
    assert!(
        series(&later, &four).unwrap() > series(&failing, &four).unwrap(),
        "the last good targets still run:\n{later}"
    );
    assert!(series(&later, &three).is_some(), "{later}");
    assert_eq!(
        series(&later, "prober_config_last_reload_successful "),
        Some(1.0),
        "a failed lookup is not a failed config"
    );
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("DNS discovery failed"), "{err}");
    assert!(
        err.contains("keeping the last answer (2 addresses)"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
