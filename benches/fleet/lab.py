#!/usr/bin/env python3
"""The fleet lab: a leaf-spine data centre in network namespaces, a prober
daemon on every host in mesh mode, a real Prometheus with the shipped alerts,
and faults that must each be found and named (docs/fleet.md).

    lab.py up      build the fabric and start everything (idempotent)
    lab.py down    stop everything and remove the fabric (idempotent)
    lab.py run     up, the soak, the six faults, the table, down
    lab.py localize  up, TRIALS lossy-link trials for `prober localize`
                   (TRACE_EVERY defaults to 15s), the table, down

SIZE=small (2 spines, 4 leaves, 2 hosts a leaf) or SIZE=large (4, 8, 2) or
SPINES/LEAVES/HOSTS. PROBER is the binary (default: target/release/prober).
SPEED (default 10) compresses time: probes go SPEED times as often as a
fleet's 1 s, and the shipped alerts' windows and `for:` are divided by it,
so a loss alert sees as many probes as in a fleet, in 1/SPEED of the time.
LAB_RUST_LOG sets the daemons' RUST_LOG (default warn; e.g.
warn,prober_daemon::paths=debug logs each trace's time and outcome).
Every address is in 198.18.0.0/15 (RFC 2544's benchmark range) and exists
only inside the lab's namespaces and on the two links from this host's root
namespace to the spines, which Prometheus scrapes through.
"""

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DIR = os.environ.get("LAB_DIR", "/tmp/prober-fleet")
PREFIX = "fl-"
# The larger fabric has 16 hosts: 4 x 8 x 4 (32) saturated two vCPUs
# (BENCHMARKS.md, "The fleet lab"); HOSTS=4 runs it on a larger machine.
SIZES = {"small": (2, 4, 2), "large": (4, 8, 2)}
SIZE = os.environ.get("SIZE", "large")
SPINES, LEAVES, HOSTS = SIZES.get(SIZE, SIZES["large"])
SPINES = int(os.environ.get("SPINES", SPINES))
LEAVES = int(os.environ.get("LEAVES", LEAVES))
HOSTS = int(os.environ.get("HOSTS", HOSTS))
SMALL = SIZE == "small"
# The larger fabric has 16 times the pairs: it runs 4 times faster than a
# fleet rather than 10, with one TCP flow a pair, to stay within two CPUs.
SPEED = float(os.environ.get("SPEED", "10" if SMALL else "4"))
UDP_FLOWS = int(os.environ.get("UDP_FLOWS", "2"))
TCP_FLOWS = int(os.environ.get("TCP_FLOWS", "2" if SMALL else "1"))
SOAK = float(os.environ.get("SOAK", "30" if SMALL else "600"))
# TRACE_EVERY=30s: the UDP job traces its peers' paths that often, with
# trace_hops (each flow followed onto its branch, for `prober localize`;
# docs/path.md); off unless set.
TRACE_EVERY = os.environ.get("TRACE_EVERY", "")
PROM_PORT = int(os.environ.get("PROM_PORT", "19090"))
PROM = f"http://127.0.0.1:{PROM_PORT}"
# Prometheus's scrape and rule interval, seconds.
SCRAPE = float(os.environ.get("SCRAPE", "1" if SMALL else "2"))
DNS_ADDR = "198.18.1.53"
DOMAIN = "fleet.lab"
PORT = 8707
METRICS = 9707


def log(*a):
    print(f"[lab {time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def sh(cmd, check=True, quiet=False):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"lab: `{cmd}` failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def nsx(ns, cmd, check=True):
    return sh(f"ip netns exec {ns} {cmd}", check=check)


def dur(seconds):
    """Seconds as a Prometheus duration (whole milliseconds)."""
    return f"{max(1, round(seconds * 1000))}ms"


def seconds(text):
    """A duration as the daemon's config writes it (`15s`, `2m`, `500ms`)
    in seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text.strip())
    if not m:
        raise SystemExit(f"lab: {text!r} is not a duration (15s, 2m)")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


# ---------------------------------------------------------------- topology


class Host:
    def __init__(self, leaf, i):
        self.leaf, self.i = leaf, i
        self.name = f"h{leaf}-{i}"
        self.ns = f"{PREFIX}h{leaf}-{i}"
        self.addr = f"198.18.{leaf}.{10 + i}"
        self.rack = f"leaf{leaf}"
        self.port = f"h{i}"  # its port on the leaf
        self.proc = None

    def __repr__(self):
        return self.name


def router_of(addr):
    """The router an address belongs to (`leaf2`, `spine1`), else None: a
    leaf answers from 198.18.L.1 or its end of a spine link
    (198.19.S.4L+2), a spine from its end (198.19.S.4L+1) or its link to
    the root namespace."""
    a = ipaddress.ip_address(addr)
    o = a.packed
    if o[0] == 198 and o[1] == 18 and o[3] == 1:
        return f"leaf{o[2]}"
    if o[0] == 198 and o[1] == 19 and o[2] == 255:
        return f"spine{(o[3] - 2) // 4}"
    if o[0] == 198 and o[1] == 19:
        return f"leaf{o[3] // 4}" if o[3] % 4 == 2 else f"spine{o[2]}"
    return None


def localize(window):
    """`prober localize` over the lab's Prometheus: its JSON, and its exit
    code."""
    r = subprocess.run(
        [prober_bin(), "localize", "--prometheus", PROM, "--window", window, "--probe", "mesh-udp", "-o", "json"],
        capture_output=True,
        text=True,
    )
    if r.returncode not in (0, 1):
        raise SystemExit(f"lab: prober localize failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout), r.returncode


def link_name(link):
    """A ranked link as the routers (or hosts) at its ends."""
    return "-".join(sorted(router_of(a) or a for a in (link["from"], link["to"])))


def hosts_of(extra=()):
    hs = [Host(leaf, i) for leaf in range(1, LEAVES + 1) for i in range(1, HOSTS + 1)]
    return hs + list(extra)


def link(ns_a, name_a, ns_b, name_b):
    sh(f"ip link add {name_a} netns {ns_a} type veth peer name {name_b} netns {ns_b}")


def up_if(ns, name, addr=None):
    if addr:
        nsx(ns, f"ip addr add {addr} dev {name}")
    nsx(ns, f"ip link set {name} up")


def router_sysctls(ns):
    for k, v in [
        ("net.ipv4.ip_forward", 1),
        # L4 hashing: flows between two hosts spread over the spines, by
        # their 5-tuple as a switch hashes. Policy 3 (custom fields: source
        # and destination address and port, protocol) rather than 1: under
        # 1 a packet that carries the sending socket's random hash (any
        # connected socket's, through veth) is routed by that hash, not by
        # its header, so a datagram with the same 5-tuple from another
        # socket (a trace following the flow) could go another way.
        ("net.ipv4.fib_multipath_hash_fields", "0x0037"),
        ("net.ipv4.fib_multipath_hash_policy", 3),
        ("net.ipv4.conf.all.rp_filter", 0),
        ("net.ipv4.conf.default.rp_filter", 0),
        # Routers send a host one ICMP error a second after a burst
        # (Linux's icmp_ratelimit, 1000 ms); time runs SPEED times faster
        # here, so their limit does too, or a trace_every compressed by
        # SPEED would find hops silent that a fleet's routers answer.
        ("net.ipv4.icmp_ratelimit", max(1, round(1000 / SPEED))),
    ]:
        nsx(ns, f"sysctl -qw {k}={v}")


def add_host(h):
    """A host namespace on its leaf's bridge."""
    sh(f"ip netns add {h.ns}")
    nsx(h.ns, "ip link set lo up")
    link(h.ns, "eth0", f"{PREFIX}l{h.leaf}", h.port)
    up_if(h.ns, "eth0", f"{h.addr}/24")
    nsx(f"{PREFIX}l{h.leaf}", f"ip link set {h.port} master br0")
    up_if(f"{PREFIX}l{h.leaf}", h.port)
    nsx(h.ns, f"ip route add default via 198.18.{h.leaf}.1")
    # A host limits its Port Unreachables as a router its Time Exceeded
    # (router_sysctls): time runs SPEED times faster here.
    nsx(h.ns, f"sysctl -qw net.ipv4.icmp_ratelimit={max(1, round(1000 / SPEED))}")


def build():
    log(f"fabric: {SPINES} spines, {LEAVES} leaves, {HOSTS} hosts a leaf")
    for s in range(1, SPINES + 1):
        ns = f"{PREFIX}s{s}"
        sh(f"ip netns add {ns}")
        nsx(ns, "ip link set lo up")
        router_sysctls(ns)
        # The link from this host's root namespace (Prometheus, Chromium).
        sh(f"ip link add {PREFIX}s{s} type veth peer name root netns {ns}")
        sh(f"ip addr add 198.19.255.{4 * s + 1}/30 dev {PREFIX}s{s}")
        sh(f"ip link set {PREFIX}s{s} up")
        up_if(ns, "root", f"198.19.255.{4 * s + 2}/30")
        nsx(ns, f"ip route add 198.19.255.0/24 via 198.19.255.{4 * s + 1}")
    for leaf in range(1, LEAVES + 1):
        ns = f"{PREFIX}l{leaf}"
        sh(f"ip netns add {ns}")
        nsx(ns, "ip link set lo up")
        router_sysctls(ns)
        nsx(ns, "ip link add br0 type bridge")
        up_if(ns, "br0", f"198.18.{leaf}.1/24")
        hops = []
        for s in range(1, SPINES + 1):
            link(ns, f"s{s}", f"{PREFIX}s{s}", f"l{leaf}")
            up_if(ns, f"s{s}", f"198.19.{s}.{4 * leaf + 2}/30")
            up_if(f"{PREFIX}s{s}", f"l{leaf}", f"198.19.{s}.{4 * leaf + 1}/30")
            nsx(f"{PREFIX}s{s}", f"ip route add 198.18.{leaf}.0/24 via 198.19.{s}.{4 * leaf + 2}")
            hops.append(f"nexthop via 198.19.{s}.{4 * leaf + 1}")
        nsx(ns, "ip route add default " + " ".join(hops))
    # Root reaches the hosts over every spine.
    hops = " ".join(f"nexthop via 198.19.255.{4 * s + 2}" for s in range(1, SPINES + 1))
    sh(f"ip route add 198.18.0.0/16 {hops}")
    for h in hosts_of():
        add_host(h)
    # The DNS server: a host of its own on leaf 1.
    dns = f"{PREFIX}dns"
    sh(f"ip netns add {dns}")
    nsx(dns, "ip link set lo up")
    link(dns, "eth0", f"{PREFIX}l1", "dns")
    up_if(dns, "eth0", f"{DNS_ADDR}/24")
    nsx(f"{PREFIX}l1", "ip link set dns master br0")
    up_if(f"{PREFIX}l1", "dns")
    nsx(dns, "ip route add default via 198.18.1.1")


def teardown():
    for ns in sh("ip netns list", check=False).split("\n"):
        ns = ns.split(" ")[0]
        if not ns.startswith(PREFIX):
            continue
        pids = sh(f"ip netns pids {ns}", check=False).split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        sh(f"ip netns del {ns}", check=False)
    for s in range(1, 17):
        sh(f"ip link del {PREFIX}s{s} 2>/dev/null", check=False)
    sh("ip route del 198.18.0.0/16 2>/dev/null", check=False)
    # The lab's Prometheus, whichever run (or LAB_DIR) started it: found by
    # its listen address, which is the lab's alone.
    sh(f"pkill -KILL -f -- '--web.listen-address=127.0.0.1:{PROM_PORT}'", check=False)
    for _ in range(50):
        if not sh(f"pgrep -f -- '--web.listen-address=127.0.0.1:{PROM_PORT}'", check=False).strip():
            break
        time.sleep(0.1)
    unthrottle()


def cpu_cgroup():
    """The cpu controller's hierarchy and whether it is cgroup v2: the unified
    /sys/fs/cgroup, v2 mounted beside v1 (`unified`), or v1's `cpu`."""
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        ctl = os.path.join(base, "cgroup.controllers")
        if os.path.exists(ctl) and "cpu" in open(ctl).read().split():
            return base, True
    if os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        return "/sys/fs/cgroup/cpu", False
    raise SystemExit("lab: no cgroup cpu controller (neither v2 cpu.max nor v1 cpu.cfs_quota_us)")


def throttle(pid, share):
    """Hold process `pid` to `share` of one CPU: cgroup v2's cpu.max, or
    v1's CFS quota where the cpu controller is bound to v1."""
    base, v2 = cpu_cgroup()
    cg = os.path.join(base, "prober-lab")
    period = 100000
    if v2:
        open(os.path.join(base, "cgroup.subtree_control"), "w").write("+cpu")
    os.makedirs(cg, exist_ok=True)
    if v2:
        open(f"{cg}/cpu.max", "w").write(f"{int(share * period)} {period}")
    else:
        open(f"{cg}/cpu.cfs_period_us", "w").write(str(period))
        open(f"{cg}/cpu.cfs_quota_us", "w").write(str(int(share * period)))
    open(f"{cg}/cgroup.procs", "w").write(str(pid))


def unthrottle():
    try:
        base, _ = cpu_cgroup()
    except SystemExit:
        return
    cg = os.path.join(base, "prober-lab")
    if not os.path.isdir(cg):
        return
    for p in open(f"{cg}/cgroup.procs").read().split():
        try:
            open(os.path.join(base, "cgroup.procs"), "w").write(p)
        except OSError:
            pass  # it exited meanwhile
    for _ in range(50):  # a process just killed may linger a moment
        try:
            os.rmdir(cg)
            return
        except OSError:
            time.sleep(0.1)


# ---------------------------------------------------------------- services


def write_dns(hosts):
    lines = [f"{h.addr} {h.name}.{DOMAIN} hosts.{DOMAIN}" for h in hosts]
    open(os.path.join(DIR, "hosts"), "w").write("\n".join(lines) + "\n")
    conf = [f"srv-host=_prober._{p}.{DOMAIN},{h.name}.{DOMAIN},{PORT}" for h in hosts for p in ("udp", "tcp")]
    open(os.path.join(DIR, "dnsmasq.conf"), "w").write("\n".join(conf) + "\n")


def start_dns():
    nsx(
        f"{PREFIX}dns",
        f"dnsmasq --keep-in-foreground --no-resolv --no-hosts --user=root "
        f"--listen-address={DNS_ADDR} --bind-interfaces --local=/{DOMAIN}/ "
        f"--addn-hosts={DIR}/hosts --conf-file={DIR}/dnsmasq.conf --local-ttl=1 "
        f"--log-facility={DIR}/dnsmasq.log --pid-file={DIR}/dnsmasq.pid &",
    )
    for _ in range(50):
        if os.path.exists(f"{DIR}/dnsmasq.pid"):
            return
        time.sleep(0.1)
    raise SystemExit("lab: dnsmasq did not start")


def stop_dns():
    try:
        pid = int(open(f"{DIR}/dnsmasq.pid").read())
        os.kill(pid, signal.SIGTERM)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return
    for _ in range(50):
        if not os.path.exists(f"/proc/{pid}"):
            break
        time.sleep(0.1)
    if os.path.exists(f"{DIR}/dnsmasq.pid"):
        os.unlink(f"{DIR}/dnsmasq.pid")


def daemon_config(h):
    iv = 1.0 / SPEED
    return f"""# The fleet lab's daemon on {h.name} (benches/fleet/lab.py writes it).
[defaults]
interval = "{dur(iv)}"
timeout = "1s"
exclude_self = true
labels = {{ node = "${{NODE_NAME}}", rack = "${{RACK}}" }}

[discovery]
server = "{DNS_ADDR}"
ttl_floor = "1s"
ttl_ceiling = "5s"

# The split's network part needs both ends' kernel transmit stamps: this
# host's own, and the peers' responders' in a follow-up frame, which a UDP
# responder sends to non-loopback peers only when told (docs/security.md).
[stamps]
transmit = true

[serve]
udp = "0.0.0.0:{PORT}"
tcp = "0.0.0.0:{PORT}"
udp_follow_ups = true

[metrics]
listen = "{h.addr}:{METRICS}"
parts = true

[[job]]
name = "mesh-udp"
dns_sd = ["udp://_prober._udp.{DOMAIN}"]
flows = {UDP_FLOWS}
{f'trace_every = "{TRACE_EVERY}"' if TRACE_EVERY else ""}
{"trace_hops = true" if TRACE_EVERY else ""}

[[job]]
name = "mesh-tcp"
dns_sd = ["tcp://_prober._tcp.{DOMAIN}"]
flows = {TCP_FLOWS}

[[job]]
name = "mesh-icmp"
dns_sd = ["icmp://hosts.{DOMAIN}"]
"""


def prober_bin():
    return os.environ.get("PROBER") or os.path.join(ROOT, "target", "release", "prober")


def start_daemon(h):
    path = os.path.join(DIR, f"{h.name}.toml")
    open(path, "w").write(daemon_config(h))
    out = open(os.path.join(DIR, f"{h.name}.log"), "a")
    env = dict(os.environ, NODE_NAME=h.name, RACK=h.rack, RUST_LOG=os.environ.get("LAB_RUST_LOG", "warn"))
    h.proc = subprocess.Popen(
        ["ip", "netns", "exec", h.ns, prober_bin(), "serve", "--config", path],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
    )
    open(os.path.join(DIR, f"{h.name}.pid"), "w").write(str(h.proc.pid))


def wait_ready(h, limit=20):
    end = time.time() + limit
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"http://{h.addr}:{METRICS}/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if h.proc and h.proc.poll() is not None:
            raise SystemExit(f"lab: the daemon on {h.name} exited ({h.proc.returncode}); see {DIR}/{h.name}.log")
        time.sleep(0.1)
    raise SystemExit(f"lab: the daemon on {h.name} was not ready in {limit} s")


def stop_daemon(h, sig=signal.SIGTERM):
    if h.proc and h.proc.poll() is None:
        h.proc.send_signal(sig)
        try:
            h.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            h.proc.kill()
            h.proc.wait()


def scaled_alerts():
    """deploy/prometheus/alerts.yml with every range and `for:` divided by
    SPEED, and nothing else changed."""
    text = open(os.path.join(ROOT, "deploy", "prometheus", "alerts.yml")).read()
    unit = {"s": 1, "m": 60, "h": 3600}

    def scale(m):
        return m.group(1) + dur(int(m.group(2)) * unit[m.group(3)] / SPEED) + m.group(4)

    text = re.sub(r"(\[)(\d+)([smh])(\])", scale, text)
    text = re.sub(r"(for: )(\d+)([smh])()", scale, text)
    path = os.path.join(DIR, "alerts.yml")
    open(path, "w").write(text)
    return path


def start_prometheus():
    alerts = scaled_alerts()
    sd = os.path.join(DIR, "targets.json")
    conf = f"""global:
  scrape_interval: {dur(SCRAPE)}
  scrape_timeout: {dur(SCRAPE)}
  evaluation_interval: {dur(SCRAPE)}
rule_files: ["{alerts}"]
scrape_configs:
  - job_name: prober
    file_sd_configs:
      - files: ["{sd}"]
        refresh_interval: 1s
"""
    open(os.path.join(DIR, "prometheus.yml"), "w").write(conf)
    shutil.rmtree(os.path.join(DIR, "tsdb"), ignore_errors=True)
    out = open(os.path.join(DIR, "prometheus.log"), "w")
    p = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={DIR}/prometheus.yml",
            f"--storage.tsdb.path={DIR}/tsdb",
            f"--web.listen-address=127.0.0.1:{PROM_PORT}",
            "--enable-feature=native-histograms",
            "--web.enable-lifecycle",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    for _ in range(100):
        if p.poll() is not None:
            raise SystemExit(f"lab: Prometheus exited ({p.returncode}); see {DIR}/prometheus.log")
        try:
            with urllib.request.urlopen(f"{PROM}/-/ready", timeout=1):
                return p
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"lab: Prometheus did not start; see {DIR}/prometheus.log")


def write_targets(hosts):
    sd = [{"targets": [f"{h.addr}:{METRICS}"], "labels": {"instance": h.name, "rack": h.rack}} for h in hosts]
    tmp = os.path.join(DIR, "targets.json.tmp")
    open(tmp, "w").write(json.dumps(sd))
    os.rename(tmp, os.path.join(DIR, "targets.json"))


class Lab:
    def __init__(self):
        self.hosts = hosts_of()
        self.spare = Host(LEAVES, HOSTS + 1)  # added during the DNS fault

    def up(self):
        teardown()
        os.makedirs(DIR, exist_ok=True)
        for f in os.listdir(DIR):
            p = os.path.join(DIR, f)
            if os.path.isfile(p):
                os.unlink(p)
        build()
        write_dns(self.hosts)
        start_dns()
        write_targets(self.hosts)
        start_prometheus()
        for h in self.hosts:
            start_daemon(h)
        for h in self.hosts:
            wait_ready(h)
        log(f"up: {len(self.hosts)} daemons, Prometheus at {PROM}, files in {DIR}")


# ---------------------------------------------------------------- Prometheus


def query(expr, at=None):
    args = {"query": expr}
    if at is not None:
        args["time"] = f"{at:.3f}"
    url = f"{PROM}/api/v1/query?" + urllib.parse.urlencode(args)
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else "run"
    if os.geteuid() != 0:
        raise SystemExit("lab: needs root (network namespaces, nft, tc, cgroups)")
    if cmd == "down":
        teardown()
        log("down")
        return 0
    if cmd == "up":
        Lab().up()
        return 0
    if cmd == "localize":
        from localize import trials

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return trials(Lab())
    if cmd == "run":
        from faults import run

        # A CI timeout's SIGTERM still tears the lab down (run's finally).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return run(Lab())
    raise SystemExit(f"lab: unknown command {cmd!r} (up, down, run)")


if __name__ == "__main__":
    sys.exit(main())
