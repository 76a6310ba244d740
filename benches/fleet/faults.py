"""The fleet lab's run: a soak, then six faults, each injected alone and
cleared, each judged through PromQL against the lab's Prometheus (lab.py
builds the lab; docs/fleet.md says what each fault must show)."""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import lab
from lab import DIR, PREFIX, log, nsx, query, sh

W = 300 / lab.SPEED  # the shipped alerts' 5-minute window, scaled
FOR_LOSS = 300 / lab.SPEED  # their `for: 5m`, scaled
PER_INTERVAL = lab.SCRAPE * lab.SPEED  # probes of one flow per scrape interval
FLOWS = lab.UDP_FLOWS + lab.TCP_FLOWS + 1  # udp, tcp and one icmp a peer
DAEMON_FLOWS = lab.UDP_FLOWS + lab.TCP_FLOWS  # those the peer's daemon answers
HOST_PARTS = ("client_send", "client_wake", "responder_wake", "responder_dwell", "responder_send")
RESPONDER_PARTS = ("responder_wake", "responder_dwell", "responder_send")


def wait_until(what, fn, limit, step=0.5):
    """Seconds until fn() is true, or None after `limit` seconds."""
    t0 = time.time()
    while time.time() - t0 < limit:
        if fn():
            return time.time() - t0
        time.sleep(step)
    log(f"gave up after {limit:.0f} s waiting for {what}")
    return None


class Run:
    def __init__(self, lb):
        self.lab = lb
        self.rows = []
        self.failures = []
        self.spent = None
        self.split = ""
        self.cleared_at = 0.0

    # ------------------------------------------------------------ reading

    @property
    def hosts(self):
        return self.lab.hosts

    def by_addr(self):
        return {h.addr: h.name for h in self.hosts}

    def peer(self, metric):
        m = re.search(r"//\[?([0-9.]+)", metric.get("target", ""))
        return self.by_addr().get(m.group(1)) if m else None

    def pairs(self):
        return [(a.name, b.name) for a in self.hosts for b in self.hosts if a is not b]

    def lost_by_flow(self, seconds, at=None):
        """Probes lost (timeout or error) per (instance, peer, target) over
        the last `seconds`."""
        d = lab.dur(seconds)
        expr = (
            f"sum by (instance, target) (increase(prober_probes_timeout_total[{d}]))"
            f" + sum by (instance, target) (increase(prober_probes_error_total[{d}]))"
        )
        out = {}
        for m, v in query(expr, at):
            out[(m["instance"], self.peer(m), m["target"])] = v
        return out

    def lost_by_pair(self, seconds, at=None):
        out = {}
        for (i, p, _t), v in self.lost_by_flow(seconds, at).items():
            out[(i, p)] = out.get((i, p), 0) + v
        return out

    def parts_by_pair(self, seconds, at=None):
        """Mean of each part per (instance, peer) over the last `seconds`,
        from the UDP and TCP flows (ICMP's replier is the peer's kernel)."""
        d = lab.dur(seconds)
        sel = 'prober_rtt_part_seconds{probe=~"mesh-udp|mesh-tcp"}'
        sums = query(f"sum by (instance, target, part) (histogram_sum(rate({sel}[{d}])))", at)
        counts = query(f"sum by (instance, target, part) (histogram_count(rate({sel}[{d}])))", at)
        acc = {}
        for rows, k in ((sums, 0), (counts, 1)):
            for m, v in rows:
                key = (m["instance"], self.peer(m), m["part"])
                acc.setdefault(key, [0.0, 0.0])[k] += v
        return {k: s / c for k, (s, c) in acc.items() if c > 0}

    def firing(self, name=None, over=None):
        sel = 'alertstate="firing"' + (f', alertname="{name}"' if name else "")
        expr = f"ALERTS{{{sel}}}" if over is None else f"max_over_time(ALERTS{{{sel}}}[{lab.dur(over)}])"
        return [m for m, _ in query(expr)]

    def up_count(self):
        r = query("count(prober_target_up == 1)")
        return int(r[0][1]) if r else 0

    def expected_targets(self):
        n = len(self.hosts)
        return n * (n - 1) * FLOWS

    # ------------------------------------------------------------ judging

    def row(self, fault, injected, detected, t_alert, fps, split, notes=""):
        self.rows.append((fault, injected, "yes" if detected else "NO", t_alert, fps, split, notes))
        if not detected:
            self.failures.append(f"{fault}: {notes}")
        log(f"{fault}: detected={detected} time={t_alert} false-positive pairs={fps} split={split} {notes}")

    def wait_quiet(self, limit=None):
        limit = limit or (2 * W + FOR_LOSS + 20)
        t = wait_until("the alerts to clear", lambda: not self.firing(), limit, step=1)
        if t is None:
            self.failures.append(f"alerts still firing after the fault was cleared: {self.firing()}")

    def fleet_up(self, limit=60):
        want = self.expected_targets()
        return wait_until(f"{want} targets up", lambda: self.up_count() == want, limit)

    # ------------------------------------------------------------ the run

    def warm_up(self):
        t = self.fleet_up()
        if t is None:
            raise SystemExit(f"lab: the mesh never came up ({self.up_count()} of {self.expected_targets()} targets up)")
        log(f"all {self.expected_targets()} targets up after {t:.1f} s")
        if lab.TRACE_EVERY:
            self.followed()

    def flows_followed(self):
        return int(sum(v for _, v in query("count(prober_path_flow)")))

    def followed(self, limit=300):
        """Waits until every UDP flow of the mesh has been traced and
        followed onto its branch (trace_hops), so `prober localize` can lay
        every flow's loss on its links."""
        n = len(self.hosts)
        want = n * (n - 1) * lab.UDP_FLOWS
        t = wait_until(f"{want} flows followed", lambda: self.flows_followed() >= want, limit, 2)
        if t is None:
            raise SystemExit(f"lab: only {self.flows_followed()} of {want} UDP flows were followed onto a branch")
        log(f"all {want} UDP flows followed onto their branches after {t:.0f} s more")

    def flows_crossing(self, link):
        """The UDP flows (instance, target) whose followed branch
        (prober_path_flow with its trace's prober_path_hop_info) crosses
        `link` (`(leaf, spine)`), and how many flows were followed."""
        hops = {}
        for m, _ in query('prober_path_hop_info{probe="mesh-udp"}'):
            key = (m["instance"], m["target"], m["path"])
            hops.setdefault(key, {})[int(m["hop"])] = m["addr"]
        want = set(link)
        out, n = set(), 0
        for m, _ in query('prober_path_flow{probe="mesh-udp"}'):
            n += 1
            h = hops.get((m["instance"], m["target"].split("#")[0], m["path"]), {})
            on = [lab.router_of(h[k]) for k in sorted(h)]
            if any({a, b} == want for a, b in zip(on, on[1:])):
                out.add((m["instance"], m["target"]))
        return out, n

    def localized(self, window, link=None):
        """`prober localize` over the last `window` seconds: (ok, what it
        said). Healthy (`link` None): nothing named. A lossy link
        (`(leaf, spine)`): that link ranked first and named."""
        if not lab.TRACE_EVERY:
            return True, ""
        out, _code = lab.localize(lab.dur(window))
        links = out["links"]
        named = [lab.link_name(x["link"]) for x in links if x["named"]]
        if link is None:
            return not named, f"localize names {named or 'no link'} ({out['lossy_flows']} of {out['flows']} flows lossy)"
        want = "-".join(sorted(link))
        top = lab.link_name(links[0]["link"]) if links else None
        ok = top == want and links[0]["named"]
        said = ", ".join(f"{lab.link_name(x['link'])} ({x['votes']:.1f})" for x in links[:3])
        return ok, f"localize ranks {said or 'nothing'}"

    def soak(self):
        log(f"soak: {lab.SOAK:.0f} s with no fault")
        t0 = time.time()
        cpu0, _ = self.cost()
        counts0 = self.split_counts()
        time.sleep(lab.SOAK)
        span = time.time() - t0
        cpu1, rss = self.cost()
        if len(cpu0) == len(cpu1):
            self.spent = ([b - a for a, b in zip(cpu0, cpu1)], span, rss)
        alerts = self.firing(over=span)
        lossy = {k: v for k, v in self.lost_by_pair(span).items() if v >= 0.5}
        time.sleep(2 * lab.SCRAPE)  # the last scrape holds the soak's end
        calm, said = self.localized(span)
        ok = not alerts and not lossy and calm
        self.split = self.split_complete(counts0, self.split_counts())
        names = sorted({a["alertname"] + ":" + a.get("instance", "") for a in alerts})
        self.row(
            "soak",
            f"none, {lab.SOAK:.0f} s",
            ok,
            "-",
            len(lossy) + len(names),
            "-",
            (f"alerts {names} lossy pairs {sorted(lossy)}" if alerts or lossy else "no alert, no pair lost a probe")
            + (f"; {said}" if said else "")
            + "; "
            + self.split,
        )

    def split_counts(self, at=None):
        """Answered probes and incomplete splits (by job, and by reason) as
        the counters stand: raw values, not increase(), since an incomplete
        count's series appears only at its first probe."""
        ok = {m["probe"]: v for m, v in query("sum by (probe) (prober_probes_ok_total)", at)}
        short = {m["probe"]: v for m, v in query("sum by (probe) (prober_split_incomplete_total)", at)}
        why = {m["reason"]: v for m, v in query("sum by (reason) (prober_split_incomplete_total)", at)}
        return ok, short, why

    def split_complete(self, before, after):
        """The share of answered probes whose split had every part, per job,
        between two split_counts (every host here is a loaded host: the
        daemons and the fabric's forwarding on two CPUs), and why the rest
        lacked a part."""
        (ok0, short0, why0), (ok1, short1, why1) = before, after
        shares = {}
        for p, n in ok1.items():
            answered = n - ok0.get(p, 0)
            if answered > 0:
                shares[p] = 1 - (short1.get(p, 0) - short0.get(p, 0)) / answered
        text = ", ".join(f"{p.removeprefix('mesh-')} {v * 100:.2f} %" for p, v in sorted(shares.items()))
        why = {k: v - why0.get(k, 0) for k, v in why1.items() if v - why0.get(k, 0) > 0}
        reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(why.items(), key=lambda x: -x[1]))
        return f"split complete: {text}" + (f" (missing: {reasons})" if reasons else "")

    def lossy_link(self):
        leaf, spine = min(2, lab.LEAVES), 1
        rack = {h.name: h.leaf for h in self.hosts}
        log(f"fault 1: 2 % random drop on the link leaf{leaf}-spine{spine}")
        t0 = time.time()
        nsx(
            f"{PREFIX}l{leaf}",
            "nft -f - <<'EOF'\n"
            "table inet lab {\n chain lossy {\n  type filter hook forward priority 0;\n"
            f'  iifname "s{spine}" numgen random mod 100 < 2 drop\n'
            f'  oifname "s{spine}" numgen random mod 100 < 2 drop\n'
            " }\n}\nEOF",
        )
        t = wait_until("ProberProbeLoss", lambda: self.firing("ProberProbeLoss"), 3 * W + FOR_LOSS + 30, 1)
        time.sleep(W / 3)
        span = time.time() - t0
        alerted = {(a["instance"], self.peer(a)) for a in self.firing("ProberProbeLoss")}
        by_flow = self.lost_by_flow(span)
        lost = self.lost_by_pair(span)
        link = (f"leaf{leaf}", f"spine{spine}")
        on_link, followed = self.flows_crossing(link) if lab.TRACE_EVERY else (set(), 0)
        named, said = self.localized(min(span, W), link)
        sh(f"ip netns exec {PREFIX}l{leaf} nft delete table inet lab")
        self.cleared_at = time.time()
        crossing = {(a, b) for a, b in self.pairs() if (rack[a] == leaf) != (rack[b] == leaf)}
        shows = {p for p in crossing if lost.get(p, 0) >= 0.5}
        fps = {p for p in alerted if p not in crossing} | {p for p, v in lost.items() if v >= 0.5 and p not in crossing}
        if followed:
            # ECMP sends only some of a pair's flows over the link: the
            # followed branches say which. Every UDP flow on it loses about
            # 2 % of each way's probes (a flow of zero is e^-17 unlikely
            # over this span), so every one of them must show loss.
            hit = {f for f in on_link if by_flow.get((f[0], self.peer({"target": f[1]}), f[1]), 0) >= 0.5}
            covered = bool(on_link) and hit == on_link
            cover_text = f"loss on {len(hit)}/{len(on_link)} followed UDP flows on the link"
        else:
            # Unfollowed, a pair crosses the link only if one of its flows
            # that loss shows on (UDP and ICMP; TCP retransmits) hashes
            # onto it; the routers hash the sorted 5-tuple, so a reply
            # takes its request's spine. Half the share of pairs that
            # expects keeps a chance miss below 1e-4 on either fabric.
            visible = lab.UDP_FLOWS + 1
            expect = 1 - (1 - 1 / lab.SPINES) ** visible
            covered = len(shows) >= 0.5 * expect * len(crossing)
            cover_text = f"loss on {len(shows)}/{len(crossing)} pairs crossing the link (expected {expect:.0%})"
        ok = t is not None and not fps and covered and alerted <= crossing and named
        self.row(
            "1 lossy link",
            f"2 % drop leaf{leaf}-spine{spine}",
            ok,
            f"{t:.0f} s" if t is not None else "-",
            len(fps),
            "network (loss)",
            f"alert names {len(alerted)} pairs, {cover_text}"
            + (f"; {said}" if said else "")
            + (f"; false positives {sorted(fps)}" if fps else ""),
        )
        self.wait_quiet()

    def parts_growth(self, inject, clear, span):
        """Mean parts per pair over `span` s before and during a fault. The
        window before starts after the last fault was cleared."""
        time.sleep(max(0.0, self.cleared_at + span + 2 * lab.SCRAPE - time.time()))
        before = self.parts_by_pair(span)
        inject()
        time.sleep(span + 2 * lab.SCRAPE)
        during = self.parts_by_pair(span)
        clear()
        self.cleared_at = time.time()
        grow = {}
        for (i, p, part), v in during.items():
            if (i, p, part) in before:
                grow.setdefault((i, p), {})[part] = v - before[(i, p, part)]
        return grow

    def senders_alive(self, procs):
        return all(p.poll() is None for p in procs)

    def queueing_link(self):
        q = next(h for h in self.hosts if h.leaf == min(3, lab.LEAVES) and h.i == 1)
        b = next(h for h in self.hosts if h.leaf != q.leaf)
        leaf_ns = f"{PREFIX}l{q.leaf}"
        span = max(10.0, W / 2)
        procs = []

        def inject():
            log(f"fault 2: tbf 20 Mbit/s on the link leaf{q.leaf}-{q.name}, a bulk TCP flow {b.name} -> {q.name}")
            nsx(leaf_ns, f"tc qdisc add dev {q.port} root tbf rate 20mbit burst 32kb latency 30ms")
            bulk = os.path.join(lab.HERE, "bulk.py")
            last = span + 4 * lab.SCRAPE + 15  # outlasts the measurement
            procs.append(subprocess.Popen(["ip", "netns", "exec", q.ns, sys.executable, bulk, "sink", q.addr, str(last + 5)]))
            time.sleep(0.3)
            procs.append(subprocess.Popen(["ip", "netns", "exec", b.ns, sys.executable, bulk, "send", q.addr, str(last)]))

        def clear():
            for p in reversed(procs):  # the sender first: it sees no reset
                p.kill()
                p.wait()
            nsx(leaf_ns, f"tc qdisc del dev {q.port} root")

        def clear_checked():
            bulk_ran.append(self.senders_alive(procs))
            clear()

        bulk_ran = []
        grow = self.parts_growth(inject, clear_checked, span)
        if not all(bulk_ran):
            self.failures.append("2 queueing link: the bulk flow ended before the measurement did")
        self.judge_split("2 queueing link", f"tbf + bulk on leaf{q.leaf}-{q.name}", grow, q.name, "network", both_ways=True)
        self.wait_quiet()

    def slow_host(self):
        r = next(h for h in self.hosts if h.leaf == lab.LEAVES and h.i == lab.HOSTS)
        span = max(10.0, W / 2)

        hog = []

        def inject():
            # A loaded node: the daemon shares a CPU quota of 30 % of a core
            # with a busy loop, as a node's pods share its CPUs. It still
            # gets all the CPU it needs (the scheduler favours a task that
            # slept), but whenever the loop has spent the quota the group
            # waits for the next period, and so does the responder's wake-up.
            # (Holding the daemon alone below what it uses makes a backlog
            # that grows without end, not a slow host: its UDP probes time
            # out and TCP requests queue behind each other.)
            log(f"fault 3: {r.name}'s prober shares 30 % of a CPU (cgroup cpu quota) with a busy loop")
            # One process (its own pid is the one moved), bounded in time.
            loop = f"import time\nend = time.time() + {span * 2 + 30:.0f}\nwhile time.time() < end:\n    pass\n"
            hog.append(subprocess.Popen([sys.executable, "-c", loop]))
            lab.throttle(r.proc.pid, 0.3)
            lab.throttle(hog[0].pid, 0.3)

        def clear():
            hog[0].kill()
            hog[0].wait()
            lab.unthrottle()

        grow = self.parts_growth(inject, clear, span)
        self.judge_split("3 slow host", f"{r.name} shares 30 % of a CPU with a busy loop", grow, r.name, "host")
        self.wait_quiet()

    def judge_split(self, fault, injected, grow, at, expect, both_ways=False):
        """Which part grew, per pair. For a network fault at `at`'s link, the
        network part must grow (>= 2 ms on average) for pairs with `at` at
        either end and the host parts must not; for a slow host the
        responder parts must grow for pairs probing `at`, and the network
        part must not. Pairs away from `at` must grow by less than a quarter
        of what the affected pairs grew (and 1 ms)."""
        affected, away, wrong = [], [], []
        net_g, host_g = [], []
        n = len(self.hosts)
        for (i, p), g in grow.items():
            net = g.get("network", 0.0)
            resp = sum(g.get(x, 0.0) for x in RESPONDER_PARTS)
            hosts = sum(g.get(x, 0.0) for x in HOST_PARTS)
            if expect == "network":
                hit = at in (i, p) if both_ways else p == at
            else:
                hit = p == at
            if hit:
                affected.append((i, p))
                # A part absent from either window is not a part that did
                # not grow: the pair is not judged, so it counts as wrong.
                if any(x not in g for x in ("network",) + HOST_PARTS):
                    wrong.append((i, p, "parts missing", sorted(g)))
                    continue
                net_g.append(net)
                host_g.append(resp if expect == "host" else hosts)
                if expect == "network" and not (net >= 2e-3 and hosts < 0.25 * net):
                    wrong.append((i, p, round(net * 1e3, 2), round(hosts * 1e3, 2)))
                if expect == "host" and not (resp >= 2e-3 and net < 0.25 * resp):
                    wrong.append((i, p, round(net * 1e3, 2), round(resp * 1e3, 2)))
            elif i != at and p != at:
                away.append((i, p, net, hosts))
        med = lambda xs: sorted(xs)[len(xs) // 2] if xs else 0.0  # noqa: E731
        # Pairs away from the fault must not grow by a quarter of what the
        # pairs at it grew (1 ms at least): the lab's hosts share two CPUs,
        # so a busy loop on one slows every host a little, but a fault must
        # stand out where it is.
        bar = max(1e-3, 0.25 * med(net_g if expect == "network" else host_g))
        fps = [(i, p, round(a * 1e3, 2), round(b * 1e3, 2)) for i, p, a, b in away if a >= bar or b >= bar]
        split = (
            f"{expect}: network +{med(net_g) * 1e3:.1f} ms, "
            f"{'responder' if expect == 'host' else 'host parts'} +{med(host_g) * 1e3:.2f} ms (medians over {len(affected)} pairs)"
        )
        # Every pair with `at` at the affected end must have been judged.
        want = 2 * (n - 1) if both_ways else n - 1
        if len(affected) != want:
            wrong.append(f"{len(affected)} of {want} pairs had parts in both windows")
        ok = bool(affected) and not wrong and not fps
        notes = ""
        if wrong:
            notes += f"pairs the split did not attribute (instance, peer, network ms, other ms): {wrong[:6]} "
        if fps:
            notes += f"false positives: {fps[:6]}"
        self.row(fault, injected, ok, f"no alert; {max(10.0, W / 2):.0f} s windows", len(fps), split, notes or "-")

    def dead_node(self):
        d = next(h for h in self.hosts if h.leaf == 1 and h.i == lab.HOSTS)
        watcher = next(h for h in self.hosts if h.leaf == min(2, lab.LEAVES))
        log(f"fault 4: the daemon on {d.name} killed")
        t0 = time.time()
        lab.stop_daemon(d, signal.SIGKILL)
        others = [h for h in self.hosts if h is not d]
        pids = {h.name: h.proc.pid for h in others}

        def down_everywhere():
            # Its kernel still answers ICMP: the host is up, its daemon is not.
            downs = [m for m, v in query("prober_target_up == 0") if self.peer(m) == d.name]
            return len(downs) == (len(self.hosts) - 1) * DAEMON_FLOWS

        t_down = wait_until("every peer to see the node down", down_everywhere, 30)
        t = wait_until("ProberTargetDown", lambda: self.firing("ProberTargetDown"), 2 * W + FOR_LOSS + 30, 1)
        alerts = self.firing("ProberTargetDown")
        named = {self.peer(a) for a in alerts}
        icmp_up = sum(1 for m, _ in query('prober_target_up{probe="mesh-icmp"} == 1') if self.peer(m) == d.name)
        page = self.status_page(watcher, d)
        log(f"fault 4: {d.name} back")
        t1 = time.time()
        lab.start_daemon(d)
        lab.wait_ready(d)

        def rejoined():
            ups = query("prober_target_up == 1")
            to_d = sum(1 for m, _ in ups if self.peer(m) == d.name)
            from_d = sum(1 for m, _ in ups if m.get("instance") == d.name)
            return to_d == (len(self.hosts) - 1) * FLOWS and from_d == (len(self.hosts) - 1) * FLOWS

        t_back = wait_until(f"{d.name} to rejoin", rejoined, 30)
        restarted = [h.name for h in others if h.proc.poll() is not None or h.proc.pid != pids[h.name]]
        ok = icmp_up == len(others) and t is not None and named == {d.name} and t_down is not None and t_back is not None and not restarted and page
        self.row(
            "4 dead node",
            f"{d.name} killed",
            ok,
            f"{t:.0f} s" if t is not None else "-",
            len(named - {d.name}),
            "host (its daemon's targets down at every peer, its ICMP up)",
            f"down at every peer after {t_down if t_down is None else round(t_down, 1)} s; "
            f"its ICMP answered at {icmp_up} of {len(others)} peers; "
            f"alert names {sorted(x or '?' for x in named)}; rejoined {t_back if t_back is None else round(t_back, 1)} s "
            f"after its restart ({time.time() - t1:.0f} s), no other daemon restarted{' (BUT: ' + str(restarted) + ')' if restarted else ''}; "
            f"status page of {watcher.name} lists it first: {page}",
        )
        del t0
        self.wait_quiet()

    def status_page(self, watcher, dead):
        """The watcher's status page during the fault: the dead peer's rows
        come first. A screenshot for a person goes to DIR."""
        url = f"http://{watcher.addr}:{lab.METRICS}/"
        try:
            html = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError as e:
            log(f"status page of {watcher.name}: {e}")
            return False
        rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S)
        targets = [re.search(r"(udp|tcp|icmp)://[0-9.]+[^<\s]*", r) for r in rows]
        targets = [t.group(0) for t in targets if t]
        n = (len(self.hosts) - 1) * FLOWS
        first = targets[:DAEMON_FLOWS]
        ok = len(targets) >= n and all(dead.addr in t for t in first)
        shot = os.path.join(DIR, "status-dead-node.png")
        try:
            subprocess.run(
                ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--run-all-compositor-stages-before-draw", "--window-size=1280,1000", f"--screenshot={shot}", url],
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            log(f"no screenshot: {e}")
        if not ok:
            log(f"status page's first rows: {first}")
        return ok

    def discovery_fails(self):
        log("fault 5: dnsmasq stopped")
        base = {m["instance"]: v for m, v in query("sum by (instance) (prober_discovery_failures_total)")}
        before = self.up_count()
        lab.stop_dns()
        t = wait_until(
            "every daemon to count a failed lookup",
            lambda: all(
                v > base.get(m["instance"], 0) for m, v in query("sum by (instance) (prober_discovery_failures_total)")
            )
            and len(query("sum by (instance) (prober_discovery_failures_total)")) >= len(self.hosts),
            30,
        )
        time.sleep(2)
        dark = before - self.up_count()
        s = self.lab.spare
        log(f"fault 5: {s.name} added while DNS is down")
        lab.add_host(s)
        lab.start_daemon(s)
        lab.wait_ready(s)
        self.lab.hosts.append(s)
        lab.write_targets(self.hosts)
        lab.write_dns(self.hosts)
        time.sleep(2)
        lab.start_dns()
        t_new = self.fleet_up(limit=40)
        ok = t is not None and dark == 0 and t_new is not None
        self.row(
            "5 discovery fails",
            "dnsmasq stopped, a host added",
            ok,
            f"{t:.0f} s" if t is not None else "-",
            dark,
            "-",
            f"every daemon counted failed lookups after {t if t is None else round(t, 1)} s and kept its peers "
            f"({dark} targets went dark); {s.name} probed by all and probing all {t_new if t_new is None else round(t_new, 1)} s after DNS came back",
        )

    def rolling_restart(self):
        log("fault 6: every daemon restarted in turn")
        t0 = time.time()
        for h in self.hosts:
            lab.stop_daemon(h)
            lab.start_daemon(h)
            lab.wait_ready(h)
        took = time.time() - t0
        time.sleep(W + FOR_LOSS + 5)
        span = time.time() - t0
        alerts = self.firing(over=span)
        lost = self.lost_by_pair(span)
        worst = max(lost.values()) if lost else 0.0
        per_pair = PER_INTERVAL * FLOWS
        over = {p: round(v) for p, v in lost.items() if v > per_pair}
        miss = {
            m["instance"]: v
            for m, v in query(f"count_over_time(up[{lab.dur(span)}]) - sum_over_time(up[{lab.dur(span)}])")
            if v > 1.5
        }
        ok = not alerts and not over and not miss
        self.row(
            "6 rolling restart",
            f"{len(self.hosts)} daemons in {took:.0f} s",
            ok,
            "-",
            len(alerts),
            "-",
            f"worst pair lost {worst:.0f} probes (one scrape interval is {per_pair:.0f} for a pair's {FLOWS} flows); "
            f"alerts {sorted({a['alertname'] for a in alerts})}; scrapes missed >1: {miss}; pairs over: {over}",
        )

    def dashboard(self):
        """Every panel of the shipped Grafana dashboard, run against the lab."""
        import json

        board = json.load(open(os.path.join(lab.ROOT, "deploy", "grafana", "prober-dashboard.json")))
        bad = []
        n = 0
        for p in board["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"].replace("$__rate_interval", lab.dur(4 * lab.SCRAPE))
                for v in ("probe", "target", "instance"):
                    expr = expr.replace(f"${v}", ".*")
                n += 1
                try:
                    res = query(expr)
                except Exception as e:  # noqa: BLE001 - the error is the finding
                    bad.append(f"{p.get('title')}: {e}")
                    continue
                want = set(re.findall(r"\{\{(\w+)\}\}", t.get("legendFormat", "")))
                if "late" in t.get("legendFormat", "") or "dup" in t.get("legendFormat", ""):
                    # replies late or duplicated: none in a healthy lab, so an
                    # empty answer is right; its labels are checked when any.
                    res = res or [({k: "x" for k in want}, 0)]
                if not res:
                    bad.append(f"{p.get('title')}: no data for {expr[:80]}")
                elif any(not want <= set(m) for m, _ in res):
                    bad.append(f"{p.get('title')}: labels {want} missing")
        # The p99 alert's expression, its threshold taken off, must read
        # the histogram this Prometheus has (native, from protobuf scrapes).
        rules = open(os.path.join(DIR, "alerts.yml")).read()
        m = re.search(r"alert: ProberRttP99High.*?expr: \|\n(.*?)\n\s*for:", rules, re.S)
        expr = re.sub(r"\s*>\s*[0-9.]+\s*$", "", m.group(1).strip()) if m else ""
        if not expr or not query(expr):
            bad.append(f"ProberRttP99High's expression has no data: {expr[:120]}")
        self.row(
            "dashboard",
            f"{n} panel queries, the p99 alert's",
            not bad,
            "-",
            0,
            "-",
            "; ".join(bad) or "every query answers with its legend's labels",
        )

    def cost(self):
        tick = os.sysconf("SC_CLK_TCK")
        cpu, rss = [], []
        for h in self.hosts:
            try:
                f = open(f"/proc/{h.proc.pid}/stat").read().split(")")[1].split()
                cpu.append((int(f[11]) + int(f[12])) / tick)
                for line in open(f"/proc/{h.proc.pid}/status"):
                    if line.startswith("VmRSS:"):
                        rss.append(int(line.split()[1]) / 1024)
            except (FileNotFoundError, IndexError):
                pass
        return cpu, rss


def run(lb):
    t_start = time.time()
    r = Run(lb)
    try:
        lb.up()
        r.warm_up()
        r.soak()
        r.dashboard()
        r.lossy_link()
        r.queueing_link()
        r.slow_host()
        r.dead_node()
        r.discovery_fails()
        r.rolling_restart()
    finally:
        if not os.environ.get("KEEP"):
            lab.teardown()
    n = len(lb.hosts)
    print()
    print(f"fleet lab: {lab.SPINES} spines, {lab.LEAVES} leaves, {n} hosts; {FLOWS} flows a pair "
          f"({lab.UDP_FLOWS} udp, {lab.TCP_FLOWS} tcp, 1 icmp) every {1000 / lab.SPEED:.0f} ms; time x{lab.SPEED:g} "
          f"(alert windows and for: divided by {lab.SPEED:g})")
    print("| fault | injected | detected | time to alert | false-positive pairs | split | evidence |")
    print("|---|---|---|---|---|---|---|")
    for row in r.rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    if r.spent:
        cpu, span, rss = r.spent
        per = [c / span for c in cpu]
        print(f"\ndaemons: CPU {sum(per) * 100:.0f} % of one core in all ({sum(per) / len(per) * 100:.1f} % each), "
              f"RSS {sum(rss):.0f} MiB in all ({max(rss):.1f} MiB the largest), over the soak; run took {time.time() - t_start:.0f} s")
    if r.failures:
        print("\nFAILED:\n  " + "\n  ".join(r.failures))
        return 1
    print("\nevery fault was found and named, with no false-positive pair")
    return 0
