//! The fleet lab in CI: the small leaf-spine fabric of benches/fleet (8
//! hosts in network namespaces, a daemon on each in mesh mode, dnsmasq for
//! discovery, a real Prometheus with deploy/prometheus/alerts.yml), the soak
//! and the six faults, each of which must be found and named with no
//! false-positive pair (docs/fleet.md); `prober localize` must name
//! nothing in the soak and rank the lossy link first (docs/path.md).
//!
//! A test binary of its own: cargo runs test binaries one after another, so
//! the lab's daemons never share the two CPUs with the rest of the suite
//! (its split checks measure a loaded host, not a machine running the suite).

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ready() -> bool {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
    });
    if !root {
        prober_core::testutil::skip("the fleet lab needs root (namespaces, nft, tc, cgroups)");
        return false;
    }
    for tool in ["prometheus", "dnsmasq", "nft", "tc", "chromium", "python3"] {
        let found = Command::new("sh")
            .args([
                "-c",
                &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            prober_core::testutil::skip(format_args!(
                "the fleet lab needs {tool} (.ci/run installs it)"
            ));
            return false;
        }
    }
    true
}

#[test]
fn the_small_fabric_finds_and_names_every_fault() {
    if !ready() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("prober-fleet-{}", std::process::id()));
    let out = Command::new("python3")
        .arg(repo().join("benches/fleet/lab.py"))
        .arg("run")
        .env("SIZE", "small")
        // The UDP job traces its peers and follows its flows onto their
        // branches, so the soak and the lossy link also ask `prober
        // localize` (nothing named healthy; the lossy link first).
        .env("TRACE_EVERY", "15s")
        .env("PROBER", env!("CARGO_BIN_EXE_prober"))
        .env("LAB_DIR", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    println!("{}", String::from_utf8_lossy(&out.stderr));
    // Its configs and logs stay for a look when it failed.
    assert!(
        out.status.success(),
        "the fleet lab failed (its files are in {}):\n{stdout}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    // The table has the soak, the dashboard's queries and the six faults.
    for row in [
        "| soak |",
        "| dashboard |",
        "| 1 lossy link |",
        "| 2 queueing link |",
        "| 3 slow host |",
        "| 4 dead node |",
        "| 5 discovery fails |",
        "| 6 rolling restart |",
    ] {
        assert!(stdout.contains(row), "no row {row} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("| NO |"),
        "a fault went undetected:\n{stdout}"
    );
    assert!(
        stdout.contains("localize names no link")
            && stdout.contains("localize ranks leaf2-spine1 ("),
        "the localizer's verdicts are not in the table:\n{stdout}"
    );
}
