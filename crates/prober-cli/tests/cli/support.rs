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
    pub(crate) grpc: String,
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
                "--grpc",
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
        let grpc = addr(if extra.contains(&"--tls-cert") {
            "grpcs"
        } else {
            "grpc"
        });
        Self {
            child,
            tcp,
            udp,
            grpc,
        }
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

/// `prober serve` with these arguments; its listening lines read back as
/// `(what, addr)`, its stderr kept for the test to read.
pub(crate) struct Serve {
    pub(crate) child: Child,
    bound: Vec<(String, String)>,
}

impl Serve {
    pub(crate) fn start(args: &[&str], listeners: usize) -> Self {
        let mut child = prober()
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prober serve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let bound = (0..listeners)
            .map(|_| {
                let line = lines.next().expect("a listening line").unwrap();
                let mut w = line.split_whitespace().skip(1);
                (w.next().unwrap().to_owned(), w.next().unwrap().to_owned())
            })
            .collect();
        Self { child, bound }
    }

    pub(crate) fn addr(&self, what: &str) -> &str {
        &self.bound.iter().find(|(w, _)| w == what).expect(what).1
    }

    pub(crate) fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Stops it with SIGTERM and returns its stderr.
    pub(crate) fn stop(mut self) -> String {
        let (code, err) = term_and_stderr(&mut self.child);
        assert_eq!(code, Some(0), "{err}");
        err
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that prober, run with `args`, refuses them as a user error
/// should be: exit 2, one error line that says `want`, no panic, no
/// results.
pub(crate) fn fails(args: &[&str], want: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        out.stdout.is_empty(),
        "{args:?} printed results: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("error") || l.starts_with("prober:"))
        .collect();
    assert_eq!(lines.len(), 1, "{args:?}: not one error line: {err}");
}

/// Runs prober and returns its exit status, its JSON lines (none when it
/// printed nothing) and its stderr, whatever the status.
pub(crate) fn run_json(args: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines = if out.stdout.is_empty() {
        Vec::new()
    } else {
        json_lines(&out)
    };
    (out.status.code(), lines, err)
}

/// A temporary directory of files a test writes (certificates, zones),
/// removed on drop.
pub(crate) struct Files(std::path::PathBuf);

impl Files {
    pub(crate) fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("prober-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// Writes `name` and returns its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    }

    pub(crate) fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A certificate to make with [`make_pki`].
#[derive(Clone, Copy)]
pub(crate) enum Leaf {
    /// For localhost and 127.0.0.1, signed by the CA.
    Server,
    /// For the name `client`, signed by the CA (mutual TLS).
    Client,
    /// As `Server`, but expired in 2021.
    Expired,
    /// As `Server`, but self-signed.
    SelfSigned,
}

/// Writes `ca.pem`, and `NAME.pem` and `NAME.key` for each leaf.
pub(crate) fn make_pki(f: &Files, leaves: &[(&str, Leaf)]) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Names of their own: with rcgen's one default name for both, OpenSSL
    // (curl) and Go (Prometheus) take a leaf for self-signed.
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "prober test CA");
    let ca_key = KeyPair::generate().unwrap();
    f.write("ca.pem", &ca_params.self_signed(&ca_key).unwrap().pem());
    let issuer = Issuer::new(ca_params, ca_key);
    for (name, leaf) in leaves {
        let sans = match leaf {
            Leaf::Client => vec!["client".to_owned()],
            _ => vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
        };
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(sans.clone()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, sans[0].as_str());
        if let Leaf::Expired = leaf {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let cert = match leaf {
            Leaf::SelfSigned => params.self_signed(&key).unwrap(),
            _ => params.signed_by(&key, &issuer).unwrap(),
        };
        f.write(&format!("{name}.pem"), &cert.pem());
        f.write(&format!("{name}.key"), &key.serialize_pem());
    }
}

/// Runs prober, asserts it exited 0 (showing its stderr if not) and returns
/// its JSON lines.
pub(crate) fn run_json_ok(args: &[&str]) -> Vec<Value> {
    ok_json(&run(args))
}

/// Asserts a prober run exited 0 (showing its stderr if not) and returns its
/// JSON lines.
pub(crate) fn ok_json(out: &Output) -> Vec<Value> {
    assert_eq!(
        out.status.code(),
        Some(0),
        "prober failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_lines(out)
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

/// Each probe's exchange, from its JSON line: (seq, user send, user
/// receive), the last two `sent_unix_ns` and `sent_unix_ns + rtt_ns`, in
/// seq order. It tells which probes had their connection to themselves.
pub(crate) struct Exchanges(Vec<(u64, u64, u64)>);

impl Exchanges {
    pub(crate) fn of(probes: &[&Value]) -> Self {
        let mut all: Vec<(u64, u64, u64)> = probes
            .iter()
            .map(|p| {
                let sent = p["sent_unix_ns"].as_u64().unwrap();
                (
                    p["seq"].as_u64().unwrap(),
                    sent,
                    sent + p["rtt_ns"].as_u64().unwrap(),
                )
            })
            .collect();
        all.sort_unstable();
        Self(all)
    }

    /// (seq, sent, received) of each, in seq order.
    pub(crate) fn all(&self) -> &[(u64, u64, u64)] {
        &self.0
    }

    /// Whether probe `seq` went out more than `margin_ns` after the one
    /// before it was answered, and was answered more than `margin_ns`
    /// before the next went out.
    pub(crate) fn alone(&self, seq: u64, margin_ns: u64) -> bool {
        let s = &self.0;
        let i = s.iter().position(|e| e.0 == seq).unwrap();
        let (_, sent, end) = s[i];
        i.checked_sub(1).is_none_or(|j| s[j].2 + margin_ns < sent)
            && s.get(i + 1).is_none_or(|next| end + margin_ns < next.1)
    }
}

/// Stops a child with SIGTERM and waits for it (tcpdump writes its last
/// packets then).
pub(crate) fn stop(mut child: std::process::Child) {
    sigterm(child.id());
    let _ = child.wait();
}

/// Stops a child with SIGTERM and returns its exit code and stderr (which
/// must be piped).
pub(crate) fn term_and_stderr(child: &mut std::process::Child) -> (Option<i32>, String) {
    use std::io::Read as _;
    sigterm(child.id());
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr is piped")
        .read_to_string(&mut err)
        .unwrap();
    (child.wait().unwrap().code(), err)
}

pub(crate) fn sigterm(pid: u32) {
    signal(pid, "TERM");
}

/// Sends `pid` the signal `sig` (`TERM`, `KILL`, `STOP`, ...) with kill(1).
pub(crate) fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// A loopback TCP port with nothing listening.
pub(crate) fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// True when the tests run as root (CI does): namespaces and raw sockets work.
pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A network namespace made for one test, deleted on drop.
pub(crate) struct Netns {
    pub(crate) name: String,
}

impl Netns {
    /// Creates a namespace with loopback up, or `None` when this host
    /// cannot (not root, or `ip netns add` fails): a failure under
    /// `CI=true`, a skip elsewhere (`testutil::skip`).
    pub(crate) fn new(tag: &str) -> Option<Self> {
        if !require_root(&format!("{tag} needs root for network namespaces")) {
            return None;
        }
        let name = format!("prober-{tag}-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            prober_core::testutil::skip(format_args!("{tag}: `ip netns add` failed"));
            return None;
        }
        let ns = Self { name };
        ns.sh("ip link set lo up");
        Some(ns)
    }

    /// Runs a shell command inside the namespace and asserts it succeeded.
    pub(crate) fn sh(&self, cmd: &str) {
        let st = Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", cmd])
            .status()
            .unwrap();
        assert!(st.success(), "in {}: {cmd}", self.name);
    }

    /// Sets who may open ICMP datagram sockets in this namespace.
    pub(crate) fn ping_group_range(&self, range: &str) {
        self.sh(&format!("sysctl -q -w net.ipv4.ping_group_range='{range}'"));
    }

    /// Starts tcpdump on the namespace's loopback, writing `file` with
    /// nanosecond stamps (and `extra` options), and returns once it listens.
    pub(crate) fn tcpdump(
        &self,
        file: &std::path::Path,
        extra: &[&str],
        filter: &str,
    ) -> std::process::Child {
        let mut dump = Command::new("ip")
            .args([
                "netns", "exec", &self.name, "tcpdump", "-i", "lo", "-n", "-U",
            ])
            .args(extra)
            .args(["--time-stamp-precision=nano", "-w"])
            .arg(file)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump starts");
        let mut err = BufReader::new(dump.stderr.take().unwrap());
        let mut line = String::new();
        while err.read_line(&mut line).unwrap() > 0 && !line.contains("listening on") {
            line.clear();
        }
        dump
    }

    /// Runs prober inside the namespace, optionally through `setpriv` first.
    pub(crate) fn prober(&self, wrapper: &[&str], args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(wrapper)
            .arg(env!("CARGO_BIN_EXE_prober"))
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

/// Processes still in the namespace go with it: a test that panics before
/// it stops its responder would leave it running (holding the test's
/// output pipe open, and its port).
impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            let pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            if !pids.is_empty() {
                let _ = Command::new("kill").arg("-KILL").args(&pids).status();
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A tmpfs of `kib` KiB mounted on a fresh directory, unmounted on drop.
pub(crate) struct TinyDisk(pub(crate) std::path::PathBuf);

impl TinyDisk {
    pub(crate) fn mount(tag: &str, kib: u32) -> Option<Self> {
        if !require_root(&format!("{tag} needs root to mount a tmpfs")) {
            return None;
        }
        let dir = std::env::temp_dir().join(format!("prober-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mounting a tmpfs on {}", dir.display());
        Some(Self(dir))
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Tests that load the machine (both cores, for seconds) and tests whose
/// assertions are timings: the first hold this for writing, the second for
/// reading, so no timing is measured while a flood runs. Other tests run
/// beside either.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by a test that floods the machine.
pub(crate) fn loads_machine() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Held by a test that asserts on timings.
pub(crate) fn times_things() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether `tool` runs here (`tool --version` starts).
pub(crate) fn installed(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

/// Whether the tools a test needs are installed. Without one the test
/// cannot run: under `CI=true` that fails it (`.ci/run` installs them all),
/// elsewhere it is skipped with a line saying why (`testutil::skip`).
pub(crate) fn require_tools(tools: &[&str], why: &str) -> bool {
    match tools.iter().find(|t| !installed(t)) {
        None => true,
        Some(missing) => {
            prober_core::testutil::skip(format_args!("{why}: {missing} is not installed"));
            false
        }
    }
}

/// Whether this test runs as root. Without root it cannot run: under
/// `CI=true` (which runs as root) that fails it, elsewhere it is skipped
/// with a line saying why (`testutil::skip`).
pub(crate) fn require_root(why: &str) -> bool {
    if is_root() {
        return true;
    }
    prober_core::testutil::skip(why);
    false
}

/// Whether dnsmasq is installed; without it a DNS test is skipped, except
/// in CI, whose `.ci/run` installs it.
pub(crate) fn have_dnsmasq() -> bool {
    require_tools(&["dnsmasq"], "DNS test (.ci/run installs dnsmasq-base)")
}

/// A loopback port with no UDP or TCP socket on it, for a DNS server
/// (dnsmasq takes both): below the kernel's ephemeral range, as the
/// daemon tests' ports are ([`crate::daemon::free_port`]). A port the
/// kernel handed out and took back could go to another test's socket (a
/// trace opens dozens at once) before dnsmasq binds it, and stay taken
/// through all of dnsmasq's retries.
pub(crate) fn free_udp_port() -> u16 {
    crate::daemon::free_port()
}

/// dnsmasq in the foreground on 127.0.0.1:`port`, answering only from
/// what `extra` gives it (no resolv.conf, no /etc/hosts), its pid file in
/// `files`; returned once it answers, killed on drop.
pub(crate) struct Dnsmasq(std::process::Child);

impl Dnsmasq {
    pub(crate) fn start(port: u16, files: &Files, extra: &[String]) -> Self {
        // dnsmasq exits at once when its port was taken between
        // `free_udp_port` and its bind (another test's socket, on a busy
        // machine): it is started again, up to five times, before the
        // wait for an answer.
        let mut why = String::new();
        for _ in 0..5 {
            let mut child = Command::new("dnsmasq")
                .args([
                    "--keep-in-foreground".to_owned(),
                    format!("--port={port}"),
                    "--listen-address=127.0.0.1".to_owned(),
                    "--bind-interfaces".to_owned(),
                    "--no-resolv".to_owned(),
                    "--no-hosts".to_owned(),
                    format!("--pid-file={}", files.path("pid")),
                ])
                .args(extra)
                .stdout(std::process::Stdio::null())
                // A file, not a pipe: with `--log-facility=-` dnsmasq logs
                // there, and a pipe nobody reads would block it when full.
                .stderr(std::fs::File::create(files.path("dnsmasq.err")).expect("a log file"))
                .spawn()
                .expect("dnsmasq starts");
            std::thread::sleep(std::time::Duration::from_millis(200));
            match child.try_wait() {
                Ok(Some(status)) => {
                    let err =
                        std::fs::read_to_string(files.path("dnsmasq.err")).unwrap_or_default();
                    why = format!("{status}: {}", err.trim());
                }
                _ => {
                    let d = Self(child);
                    wait_for_dns(port);
                    return d;
                }
            }
        }
        panic!("dnsmasq on port {port} exited five times; the last: {why}");
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A DNS server on 127.0.0.1:`port` answers (a query for the root's A
/// record gets any reply), within 5 s; panics otherwise.
pub(crate) fn wait_for_dns(port: u16) {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .unwrap();
    let q = [0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1];
    for _ in 0..50 {
        let _ = s.send_to(&q, ("127.0.0.1", port));
        if s.recv_from(&mut [0u8; 512]).is_ok() {
            return;
        }
    }
    panic!("the DNS server on port {port} did not answer");
}

/// A DNS upstream on a loopback port that answers every query with
/// SERVFAIL (its thread lives as long as the test process); its port.
pub(crate) fn servfail_upstream() -> u16 {
    let up = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = up.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut b = [0u8; 512];
        while let Ok((n, from)) = up.recv_from(&mut b) {
            if n >= 4 {
                b[2] |= 0x80;
                b[3] = (b[3] & 0xf0) | 2;
                let _ = up.send_to(&b[..n], from);
            }
        }
    });
    port
}
