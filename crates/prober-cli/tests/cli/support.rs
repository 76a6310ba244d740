//! Running the binary and a background responder.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

pub(crate) fn prober() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_prober"));
    cmd.env_remove("RUST_LOG");
    cmd
}

pub(crate) fn run(args: &[&str]) -> Output {
    prober()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("prober runs")
}

/// A `prober serve` child on loopback ephemeral ports; killed on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) tcp: String,
    pub(crate) udp: String,
}

impl Server {
    pub(crate) fn start(extra: &[&str]) -> Self {
        let mut child = prober()
            .args([
                "serve",
                "--quiet",
                "--tcp",
                "127.0.0.1:0",
                "--udp",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("prober serve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut addr = |proto: &str| {
            let line = lines.next().expect("a listening line").unwrap();
            let rest = line
                .strip_prefix(&format!("listening {proto} "))
                .expect(&line);
            rest.to_owned()
        };
        let tcp = addr("tcp");
        let udp = addr("udp");
        Self { child, tcp, udp }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn wait(mut self) -> std::process::ExitStatus {
        let status = self.child.wait().unwrap();
        std::mem::forget(self);
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad json line {l:?}: {e}")))
        .collect()
}

pub(crate) fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

pub(crate) fn sigterm(pid: u32) {
    let ok = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM {pid}");
}

/// A loopback TCP port with nothing listening.
pub(crate) fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
