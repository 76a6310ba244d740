"""The localizer's trials in the fleet lab (docs/path.md, "Naming the bad
link"): a random drop on one leaf-spine link chosen at random (both
directions), TRIALS times; after WINDOW fleet seconds of it (scaled by
SPEED, as the lab's alerts are), `prober localize` over that window must
rank the link first (LOSS=1) or in the top 3 (LOSS=0.3, or TWO=1: two
links at once, both in the top 3). HEALTHY=1 instead runs the fabric with
no fault and asks the localizer every WINDOW that long: nothing may be
named. REROUTE=1 takes a leaf-spine link down (both ends) and withdraws
the spine from the other leaves' routes to that leaf, as BGP would; it
times the path changes of the pairs that crossed the link, and asks the
localizer once the window has passed whether it blames the link.

    TRIALS=10 LOSS=1 python3 benches/fleet/lab.py localize
"""

import os
import random
import time

import lab
from faults import Run
from lab import PREFIX, log, nsx, sh

TRIALS = int(os.environ.get("TRIALS", "10"))
LOSS = float(os.environ.get("LOSS", "1"))
TWO = os.environ.get("TWO") == "1"
HEALTHY = os.environ.get("HEALTHY") == "1"
REROUTE = os.environ.get("REROUTE") == "1"
# The fleet's 5 minutes, scaled: the issue's "within 5 minutes".
WINDOW = float(os.environ.get("WINDOW", "300")) / lab.SPEED
SEED = int(os.environ.get("SEED", str(int(time.time()))))


def drop(leaf, spine, pct):
    """`pct` % random drop both ways on the link from leaf to spine (its
    leaf end), as faults.py's lossy link. numgen draws per 10,000 so that
    0.3 % is exact."""
    per = round(pct * 100)
    nsx(
        f"{PREFIX}l{leaf}",
        "nft -f - <<'EOF'\n"
        f"table inet loc{spine} {{\n chain lossy {{\n  type filter hook forward priority 0;\n"
        f'  iifname "s{spine}" numgen random mod 10000 < {per} drop\n'
        f'  oifname "s{spine}" numgen random mod 10000 < {per} drop\n'
        " }\n}\nEOF",
    )


def clear(leaf, spine):
    nsx(f"{PREFIX}l{leaf}", f"nft delete table inet loc{spine}", check=False)


def changes():
    """prober_path_changes_total by (instance, peer address)."""
    out = {}
    for m, v in lab.query("prober_path_changes_total"):
        addr = m.get("target", "").split("//")[-1].split(":")[0]
        out[(m["instance"], addr)] = v
    return out


def reroute(r, leaf=2, spine=1):
    """The link leaf-spine down, the spine withdrawn from the other leaves'
    routes to the leaf's hosts; each pair that crossed it is timed to its
    first path change, and the localizer asked after one window whether
    it blames the link."""
    hosts = r.hosts
    # Pairs whose branches can cross the link: one end on the leaf, the
    # other elsewhere (both ways).
    crossing = [(a.name, b.addr) for a in hosts for b in hosts if (a.leaf == leaf) != (b.leaf == leaf)]
    before = changes()
    t0 = time.time()
    nsx(f"{PREFIX}l{leaf}", f"ip link set s{spine} down")
    nsx(f"{PREFIX}s{spine}", f"ip link set l{leaf} down")
    others = [sp for sp in range(1, lab.SPINES + 1) if sp != spine]
    for other in range(1, lab.LEAVES + 1):
        if other == leaf:
            continue
        hops = " ".join(f"nexthop via 198.19.{sp}.{4 * other + 1}" for sp in others)
        nsx(f"{PREFIX}l{other}", f"ip route add 198.18.{leaf}.0/24 {hops}")
    # Prometheus scrapes from the root namespace over every spine: the
    # leaf's daemons too, over the others (else a daemon whose scrape
    # hashed onto the spine goes unseen, and its changes with it).
    hops = " ".join(f"nexthop via 198.19.255.{4 * sp + 2}" for sp in others)
    sh(f"ip route add 198.18.{leaf}.0/24 {hops}")
    log(f"reroute: leaf{leaf}-spine{spine} down, {len(crossing)} pairs crossed it")
    seen = {}
    period = lab.seconds(lab.TRACE_EVERY)
    # Two periods at least: one for each target's trace to come round,
    # and slack for a round of traces that overruns.
    wait = max(4 * WINDOW, 2 * period + 30)
    while time.time() - t0 < wait and len(seen) < len(crossing):
        now = changes()
        for p in crossing:
            if p not in seen and now.get(p, 0) > before.get(p, 0):
                seen[p] = time.time() - t0
        time.sleep(1)
    times = sorted(seen.values())
    # Loss of the reroute's first seconds, a window on.
    time.sleep(max(0.0, t0 + WINDOW - time.time()))
    out, _ = lab.localize(lab.dur(WINDOW))
    named = [lab.link_name(x["link"]) for x in out["links"] if x["named"]]
    ranked = [lab.link_name(x["link"]) for x in out["links"]]
    link = f"leaf{leaf}-spine{spine}"
    for other in range(1, lab.LEAVES + 1):
        if other != leaf:
            nsx(f"{PREFIX}l{other}", f"ip route del 198.18.{leaf}.0/24", check=False)
    sh(f"ip route del 198.18.{leaf}.0/24", check=False)
    nsx(f"{PREFIX}l{leaf}", f"ip link set s{spine} up")
    nsx(f"{PREFIX}s{spine}", f"ip link set l{leaf} up")
    # A link that went down took its routes with it: as lab.build() made them.
    nsx(f"{PREFIX}s{spine}", f"ip route replace 198.18.{leaf}.0/24 via 198.19.{spine}.{4 * leaf + 2}")
    hops = " ".join(f"nexthop via 198.19.{sp}.{4 * leaf + 1}" for sp in range(1, lab.SPINES + 1))
    nsx(f"{PREFIX}l{leaf}", f"ip route replace default {hops}")
    def at(s):
        return sum(1 for t in times if t <= s)
    print(f"\nreroute: {link} down; trace_every {lab.TRACE_EVERY}; {len(crossing)} pairs crossed it")
    print(f"pairs that counted a path change: {at(15)} by 15 s, {at(30)} by 30 s, {at(60)} by 60 s, "
          f"{at(period)} within one trace period ({period:.0f} s), {len(times)} by {wait:.0f} s"
          + (f"; median {times[len(times) // 2]:.0f} s, last {times[-1]:.0f} s" if times else ""))
    print(f"localize over the {WINDOW:.0f} s after it: names {named or 'nothing'}; {link} "
          + (f"ranked {ranked.index(link) + 1}" if link in ranked else "not ranked")
          + f"; top 3 {ranked[:3]}")
    return link not in named


def trials(lb):
    if not lab.TRACE_EVERY:
        lab.TRACE_EVERY = "15s"
    rng = random.Random(SEED)
    r = Run(lb)
    rows = []
    try:
        lb.up()
        r.warm_up()
        if REROUTE:
            return 0 if reroute(r) else 1
        links = [(leaf, spine) for leaf in range(1, lab.LEAVES + 1) for spine in range(1, lab.SPINES + 1)]
        for i in range(TRIALS):
            if HEALTHY:
                time.sleep(WINDOW)
                out, _ = lab.localize(lab.dur(WINDOW))
                named = [lab.link_name(x["link"]) for x in out["links"] if x["named"]]
                rows.append((i + 1, "none", "-", not named, f"named {named or 'nothing'}; {out['lossy_flows']} of {out['flows']} flows lossy"))
                log(f"healthy {i + 1}: named {named}")
                continue
            faulty = rng.sample(links, 2 if TWO else 1)
            for leaf, spine in faulty:
                drop(leaf, spine, LOSS)
            log(f"trial {i + 1}: {LOSS} % drop on {faulty}")
            t0 = time.time()
            time.sleep(WINDOW)
            out, _ = lab.localize(lab.dur(time.time() - t0))
            for leaf, spine in faulty:
                clear(leaf, spine)
            ranked = [lab.link_name(x["link"]) for x in out["links"]]
            want = ["-".join(sorted((f"leaf{leaf}", f"spine{spine}"))) for leaf, spine in faulty]
            ranks = [ranked.index(w) + 1 if w in ranked else None for w in want]
            need = 3 if TWO or LOSS < 1 else 1
            ok = all(k is not None and k <= need for k in ranks)
            rows.append((i + 1, " + ".join(want), ranks, ok, ", ".join(ranked[:3])))
            log(f"trial {i + 1}: ranks {ranks} ({'ok' if ok else 'MISSED'}); top {ranked[:3]}")
            # The fault's loss leaves the next trial's window.
            time.sleep(WINDOW)
    finally:
        if not os.environ.get("KEEP"):
            lab.teardown()
    what = "healthy" if HEALTHY else f"{LOSS} % drop on {'two links' if TWO else 'one link'}"
    print(f"\nlocalize trials: {what}, {TRIALS} trials, window {WINDOW:.0f} s (5 fleet minutes at x{lab.SPEED:g}), seed {SEED}")
    print("| trial | faulty link | its rank | ok | top 3 |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    good = sum(1 for row in rows if row[3])
    print(f"\n{good} of {len(rows)} trials ok")
    return 0
