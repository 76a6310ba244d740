"""The localizer's trials in the fleet lab (docs/path.md, "Naming the bad
link"): a random drop on one leaf-spine link chosen at random (both
directions), TRIALS times; after WINDOW fleet seconds of it (scaled by
SPEED, as the lab's alerts are), `prober localize` over that window must
rank the link first (LOSS=1) or in the top 3 (LOSS=0.3, or TWO=1: two
links at once, both in the top 3). HEALTHY=1 instead runs the fabric with
no fault and asks the localizer every WINDOW that long: nothing may be
named.

    TRIALS=10 LOSS=1 python3 benches/fleet/lab.py localize
"""

import os
import random
import time

import lab
from faults import Run
from lab import PREFIX, log, nsx

TRIALS = int(os.environ.get("TRIALS", "10"))
LOSS = float(os.environ.get("LOSS", "1"))
TWO = os.environ.get("TWO") == "1"
HEALTHY = os.environ.get("HEALTHY") == "1"
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


def trials(lb):
    if not lab.TRACE_EVERY:
        lab.TRACE_EVERY = "15s"
    rng = random.Random(SEED)
    r = Run(lb)
    rows = []
    try:
        lb.up()
        r.warm_up()
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
