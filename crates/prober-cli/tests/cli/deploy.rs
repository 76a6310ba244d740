//! The deploy/ files and the documented config parse and validate.

use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::YamlLoader;

use crate::support::run;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check_config(path: &Path) {
    let out = run(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--check-config",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("is valid"));
}

#[test]
fn prometheus_config_passes_promtool() {
    let path = repo().join("deploy/prometheus/prometheus.yml");
    match Command::new("promtool")
        .args(["check", "config"])
        .arg(&path)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => prober_core::testutil::skip("promtool is not installed (.ci/run installs it)"),
    }
}

#[test]
fn kubernetes_manifests_parse_and_carry_a_valid_config() {
    let text = std::fs::read_to_string(repo().join("deploy/kubernetes/prober.yaml")).unwrap();
    let docs = YamlLoader::load_from_str(&text).unwrap();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ConfigMap", "Service", "DaemonSet"]);
    // Mesh mode: a headless Service over the DaemonSet's pods, which the
    // mesh job discovers through DNS.
    assert!(docs[1]["spec"]["clusterIP"].as_str() == Some("None"));
    assert_eq!(docs[1]["spec"]["selector"]["app"].as_str(), Some("prober"));
    let docs = [docs[0].clone(), docs[2].clone()];
    let args: Vec<&str> = docs[1]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[2..4], ["serve", "--quiet"]);
    // Its probes ask the daemon's own health endpoints (tested in daemon.rs).
    let c = &docs[1]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    // The ConfigMap's prober.toml is a valid config (with its targets file).
    let dir = std::env::temp_dir().join(format!("prober-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = &docs[0]["data"];
    let toml = data["prober.toml"]
        .as_str()
        .unwrap()
        .replace("/etc/prober/targets.txt", "targets.txt");
    assert!(
        toml.contains("prober-peers.monitoring.svc.cluster.local")
            && toml.contains("exclude_self = true"),
        "{toml}"
    );
    // The DNS name is looked up at a closed loopback port, never at this
    // machine's resolver: the lookup fails, which leaves the job empty but
    // the config valid.
    let closed = crate::daemon::free_port();
    let toml = format!("[discovery]\nserver = \"127.0.0.1:{closed}\"\n{toml}");
    std::fs::write(dir.join("prober.toml"), toml).unwrap();
    std::fs::write(
        dir.join("targets.txt"),
        data["targets.txt"].as_str().unwrap(),
    )
    .unwrap();
    let env = c["env"].as_vec().unwrap();
    let names: Vec<&str> = env.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["NODE_NAME", "ZONE"]);
    let out = crate::support::prober()
        .args(["serve", "--check-config", "--config"])
        .arg(dir.join("prober.toml"))
        .env("NODE_NAME", "node-1")
        .env("ZONE", "z1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("is valid"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn grafana_dashboard_is_json_over_prober_metrics() {
    let text =
        std::fs::read_to_string(repo().join("deploy/grafana/prober-dashboard.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exprs: Vec<String> = v["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["expr"].as_str().unwrap().to_owned())
        })
        .collect();
    assert!(
        exprs
            .iter()
            .any(|e| e.contains("histogram_quantile(0.99")
                && e.contains("prober_rtt_seconds_bucket"))
    );
    assert!(exprs.iter().any(|e| e.contains("prober_probes_ok_total") && e.contains("prober_probes_sent_total")));
}

#[test]
fn systemd_unit_runs_the_daemon() {
    let text = std::fs::read_to_string(repo().join("deploy/systemd/prober.service")).unwrap();
    for needed in [
        "[Unit]",
        "[Service]",
        "[Install]",
        "ExecStart=/usr/local/bin/prober --threads 1 serve --quiet --config",
        "ExecReload=/bin/kill -HUP $MAINPID",
        // The sandbox docs/security.md promises.
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=CAP_NET_RAW\n",
        "SystemCallFilter=@system-service",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_NETLINK AF_UNIX AF_PACKET",
    ] {
        assert!(text.contains(needed), "{needed}");
    }
    // systemd's own reading of the unit, where systemd is installed: an
    // unknown or misspelt directive is a warning there.
    if crate::support::installed("systemd-analyze") {
        let dir = std::env::temp_dir().join(format!("prober-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let unit = dir.join("prober.service");
        // The binary's path must exist for `verify`.
        std::fs::write(
            &unit,
            text.replace("/usr/local/bin/prober", env!("CARGO_BIN_EXE_prober")),
        )
        .unwrap();
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let ours: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("prober.service"))
            .collect();
        assert!(ours.is_empty(), "systemd-analyze: {err}");
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        prober_core::testutil::skip(
            "systemd-analyze is not installed; the unit's directives were not checked by systemd",
        );
    }
}

#[test]
fn documented_example_config_is_valid() {
    let doc = std::fs::read_to_string(repo().join("docs/config.md")).unwrap();
    let example = doc
        .split("```toml")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("prober-doc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The sinks' directory must exist (the systemd unit's StateDirectory
    // makes /var/lib/prober); here it is the test's own directory.
    let missing = dir.join("missing");
    std::fs::write(
        dir.join("prober.toml"),
        example.replace("/var/lib/prober/", &format!("{}/", missing.display())),
    )
    .unwrap();
    std::fs::write(dir.join("fleet.txt"), "udp://10.0.0.4:8707\n").unwrap();
    let out = run(&[
        "serve",
        "--config",
        dir.join("prober.toml").to_str().unwrap(),
        "--check-config",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("missing") && err.contains("No such file"),
        "{err}"
    );
    assert!(!missing.exists(), "--check-config created a directory");
    std::fs::write(
        dir.join("prober.toml"),
        example.replace("/var/lib/prober/", &format!("{}/", dir.display())),
    )
    .unwrap();
    std::fs::write(
        dir.join("fleet.txt"),
        "# more targets\nudp://10.0.0.4:8707\n",
    )
    .unwrap();
    check_config(&dir.join("prober.toml"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn prometheus_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = repo().join("deploy/prometheus");
    for (verb, file) in [("check", "alerts.yml"), ("test", "alerts_test.yml")] {
        let path = dir.join(file);
        let Ok(out) = Command::new("promtool")
            .args([verb, "rules"])
            .arg(&path)
            .output()
        else {
            prober_core::testutil::skip("promtool is not installed (.ci/run installs it)");
            return;
        };
        assert!(
            out.status.success(),
            "promtool {verb} rules {}: {}{}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// deploy/README.md says what alerts.yml has: every alert in its table,
/// and an inhibit rule whose `equal` labels the two alerts it pairs both
/// keep (the daemon's job is the `probe` label, not Prometheus's `job`).
#[test]
fn the_deploy_readme_matches_the_alert_rules() {
    let readme = std::fs::read_to_string(repo().join("deploy/README.md")).unwrap();
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 5, "{alerts:?}");
    for a in &alerts {
        assert!(
            readme.contains(&format!("| `{a}` |")),
            "deploy/README.md's table lacks {a}"
        );
    }
    // The label sets the loss and down alerts keep.
    let by = |alert: &str| -> Vec<String> {
        let at = rules.find(&format!("- alert: {alert}")).unwrap();
        let expr = &rules[at..];
        let open = expr.find("by (").unwrap() + 4;
        let close = open + expr[open..].find(')').unwrap();
        expr[open..close]
            .split(',')
            .map(|l| l.trim().to_owned())
            .collect()
    };
    let equal = readme
        .lines()
        .find_map(|l| l.trim().strip_prefix("equal: ["))
        .expect("an inhibit rule in deploy/README.md");
    for label in equal.trim_end_matches(']').split(',').map(str::trim) {
        for alert in ["ProberTargetDown", "ProberProbeLoss"] {
            assert!(
                by(alert).iter().any(|l| l == label),
                "the inhibit rule's {label:?} is not a label of {alert}: {:?}",
                by(alert)
            );
        }
    }
    assert!(
        readme.contains("sum by (le, probe, target, instance)"),
        "the Grafana paragraph names the dashboard's labels"
    );
}
