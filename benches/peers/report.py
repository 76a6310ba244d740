#!/usr/bin/env python3
"""Turn the raw outputs of benches/peers/run.sh into BENCHMARKS.md.

Usage: report.py OUT_DIR REPORT_PATH

OUT_DIR holds rN/NAME.{cmd,out,err,rc,time} per round and command, na/TOOL
for peers that are not available, and a few run facts (started, rounds, ...).
Nothing here raises on a bad or missing output: such a cell says why instead.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import statistics
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Fail(Exception):
    """A run that produced no usable figures; the message goes in the table."""


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in ANSI.sub("", text).splitlines() if ln.strip()]
    return lines[-1][:120] if lines else ""


def pct(sorted_vals: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(1, math.ceil(p / 100 * len(sorted_vals)))
    return sorted_vals[k - 1]


# ------------------------------------------------------------------ parsers
# Each parser takes the run's directory and name and returns a dict with
# times in microseconds: p50, p99 (or None), mean, count (str), and extras.


def files(d: Path, name: str) -> tuple[str, str, int | None]:
    out = read(d / f"{name}.out")
    err = read(d / f"{name}.err")
    rc_text = read(d / f"{name}.rc").strip()
    if not rc_text:
        raise Fail("not run")
    return out, err, int(rc_text)


def timeout_or(rc: int, err: str, out: str = "") -> Fail:
    if rc in (124, 137):
        return Fail("timed out")
    return Fail(f"failed (exit {rc}): {last_line(err) or last_line(out)}")


def parse_prober(d: Path, name: str) -> dict:
    out, err, rc = files(d, name)
    summary = None
    for line in out.splitlines():
        if '"summary"' in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("type") == "summary":
                summary = obj
    if summary is None or not summary.get("rtt"):
        raise timeout_or(rc, err, out)
    rtt, lag = summary["rtt"], summary.get("send_lag") or {}
    ok, sent = summary.get("ok", 0), summary.get("sent", 0)
    res = {
        "p50": rtt["p50"] / 1e3,
        "p99": rtt["p99"] / 1e3,
        "mean": rtt["mean"] / 1e3,
        "count": str(sent) if ok == sent else f"{ok} ok of {sent}",
        "n": ok,
        "lag_p50": lag.get("p50", math.nan) / 1e3,
        "lag_p99": lag.get("p99", math.nan) / 1e3,
    }
    t = read(d / f"{name}.time").split()
    if len(t) >= 3:
        try:
            wall, user, sys_ = (float(x) for x in t[-3:])
            res["cpu"] = (user + sys_) / wall if wall > 0 else math.nan
        except ValueError:
            pass
    return res


def parse_ping(d: Path, name: str) -> dict:
    out, err, rc = files(d, name)
    times = sorted(float(m) * 1e3 for m in re.findall(r"time=([0-9.]+) ms", out))
    if not times:
        raise timeout_or(rc, err, out)
    m = re.search(r"(\d+) packets transmitted", out)
    sent = int(m.group(1)) if m else len(times)
    return {
        "p50": pct(times, 50),
        "p99": pct(times, 99),
        "mean": statistics.fmean(times),
        "count": str(sent) if len(times) == sent else f"{len(times)} ok of {sent}",
        "n": len(times),
    }


def parse_sockperf(d: Path, name: str) -> dict:
    out, err, rc = files(d, name)
    text = ANSI.sub("", out + "\n" + err)
    p = {
        float(a): float(b)
        for a, b in re.findall(r"percentile\s+([0-9.]+)\s*=\s*([0-9.]+)", text)
    }
    if 50.0 not in p or 99.0 not in p:
        raise timeout_or(rc, err, out)
    n = re.search(r"Total (\d+) observations", text)
    mean = re.search(r"avg-rtt=([0-9.]+)", text)
    valid = re.search(r"\[Valid Duration\] RunTime=([0-9.]+) sec", text)
    n_obs = int(n.group(1)) if n else 0
    secs = f" in {float(valid.group(1)):.2f} s" if valid else ""
    return {
        "p50": p[50.0],
        "p99": p[99.0],
        "mean": float(mean.group(1)) if mean else math.nan,
        "count": f"{n_obs}{secs}",
        "n": n_obs,
    }


UNITS = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "sec": 1e6, "s": 1e6}


def parse_qperf(d: Path, name: str) -> dict:
    out, err, rc = files(d, name)
    m = re.search(r"latency\s*=\s*([0-9.]+)\s*(ns|us|µs|ms|sec|s)\b", out)
    if not m:
        raise timeout_or(rc, err, out)
    one_way = float(m.group(1)) * UNITS[m.group(2)]
    msgs = re.search(r"loc_send_msgs\s*=\s*(\d+)", out)
    n = int(msgs.group(1)) if msgs else 0
    return {
        "p50": None,
        "p99": None,
        "mean": 2 * one_way,
        "count": f"{n} in 3 s" if n else "3 s",
        "n": n,
    }


def parse_ghz(d: Path, name: str) -> dict:
    out, err, rc = files(d, name)
    try:
        obj = json.loads(out)
    except ValueError:
        raise timeout_or(rc, err, out) from None
    dist = {
        int(x["percentage"]): x["latency"] / 1e3
        for x in obj.get("latencyDistribution") or []
        if x.get("percentage") is not None and x.get("latency") is not None
    }
    codes = obj.get("statusCodeDistribution") or {}
    ok = int(codes.get("OK", 0))
    if 50 not in dist or 99 not in dist or ok == 0:
        errs = obj.get("errorDistribution") or {}
        reason = next(iter(errs), "") or last_line(err)
        raise Fail(f"failed: {reason[:120]}")
    total = int(obj.get("count", ok))
    count = str(ok) if ok == total else f"{ok} ok of {total}"
    if obj.get("endReason") == "timeout":
        count += " (time cap -x hit)"
    return {
        "p50": dist[50],
        "p99": dist[99],
        "mean": obj.get("average", 0) / 1e3,
        "count": count,
        "n": ok,
    }


# ------------------------------------------------------------------ runs
def collect(out: Path, rounds: int, name: str, parser) -> tuple[list[dict], list[str]]:
    """Parsed results of NAME over the rounds, and the failures."""
    results, fails = [], []
    for r in range(1, rounds + 1):
        try:
            results.append(parser(out / f"r{r}", name))
        except Fail as e:
            fails.append(f"round {r}: {e}")
        except Exception as e:  # noqa: BLE001 - a report must come out anyway
            fails.append(f"round {r}: cannot parse ({type(e).__name__}: {e})")
    return results, fails


def med(results: list[dict], key: str) -> float | None:
    vals = [x[key] for x in results if x.get(key) is not None and not math.isnan(x[key])]
    return statistics.median(vals) if vals else None


def us(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 1000:
        return f"{v:,.0f} µs"
    if v >= 100:
        return f"{v:.0f} µs"
    return f"{v:.1f} µs"


def count_cell(results: list[dict]) -> str:
    if not results:
        return "—"
    counts = [x["count"] for x in results]
    if len(set(counts)) == 1:
        return counts[0]
    by_n = sorted(results, key=lambda x: x["n"])
    return f"{by_n[len(by_n) // 2]['count']} (median)"


def fmt_ratio(v: float) -> str:
    return f"{v:.2f}" if v >= 0.1 else f"{v:.3f}"


def ratio(a: list[dict | None], b: list[dict | None], ka: str, kb: str) -> float | None:
    """Median over rounds of a[ka] / b[kb], rounds where both ran."""
    vals = []
    for x, y in zip(a, b):
        if x and y and x.get(ka) and y.get(kb):
            vals.append(x[ka] / y[kb])
    return statistics.median(vals) if vals else None


def per_round(out: Path, rounds: int, name: str, parser) -> list[dict | None]:
    res = []
    for r in range(1, rounds + 1):
        try:
            res.append(parser(out / f"r{r}", name))
        except Exception:  # noqa: BLE001
            res.append(None)
    return res


# ------------------------------------------------------------------ report
def main() -> int:
    out, report = Path(sys.argv[1]), Path(sys.argv[2])
    rounds = int(read(out / "rounds").strip() or "1")
    na = {p.name: read(p).strip() for p in (out / "na").glob("*")} if (out / "na").is_dir() else {}

    rows: list[list[str]] = []
    notes: list[str] = []
    failures: list[str] = []

    def fail_cell(fails: list[str]) -> str:
        # Show the first round's reason; the rest go to the notes.
        return fails[0].split(": ", 1)[1] if fails else "no result"

    def tool_row(tool, mode, name, parser, extra=None):
        res, fails = collect(out, rounds, name, parser)
        failures.extend(f"{tool} {mode}: {f}" for f in fails)
        if not res:
            rows.append([tool, mode, "—", f"failed: {fail_cell(fails)}", "", ""])
            return None
        p50, p99 = med(res, "p50"), med(res, "p99")
        p50_cell = us(p50)
        if extra == "mean":
            p50_cell += f" (mean {us(med(res, 'mean'))})"
        rows.append([tool, mode, count_cell(res), p50_cell, us(p99), "—"])
        return res

    def pair(mode, a_name, peer, b_name, b_parser, qperf=False):
        tool_row("prober", mode, a_name, parse_prober, extra="mean" if qperf else None)
        if peer in na:
            rows.append([peer, mode, "—", f"not available: {na[peer]}", "", ""])
            return
        b_res, fails = collect(out, rounds, b_name, b_parser)
        failures.extend(f"{peer} {mode}: {f}" for f in fails)
        if not b_res:
            rows.append([peer, mode, "—", f"not available: {fail_cell(fails)}", "", ""])
            return
        a_pr = per_round(out, rounds, a_name, parse_prober)
        b_pr = per_round(out, rounds, b_name, b_parser)
        if qperf:
            r_mean = ratio(a_pr, b_pr, "mean", "mean")
            rows.append([
                peer, mode, count_cell(b_res),
                f"{us(med(b_res, 'mean'))} (2× mean)²", "—",
                f"mean {fmt_ratio(r_mean)}" if r_mean else "—",
            ])
            return
        r50, r99 = ratio(a_pr, b_pr, "p50", "p50"), ratio(a_pr, b_pr, "p99", "p99")
        cell = " · ".join(
            f"{k} {fmt_ratio(v)}" for k, v in (("p50", r50), ("p99", r99)) if v is not None
        ) or "—"
        rows.append([peer, mode, count_cell(b_res), us(med(b_res, "p50")), us(med(b_res, "p99")), cell])

    pair("ICMP, 10 ms interval", "prober_icmp10", "ping", "ping_icmp10", parse_ping)
    pair("ICMP, back to back (-i 0)", "prober_icmp0", "ping", "ping_icmp0", parse_ping)
    pair("TCP 64 B, closed loop", "prober_tcp", "sockperf", "sockperf_tcp", parse_sockperf)
    pair("UDP 64 B, closed loop", "prober_udp", "sockperf", "sockperf_udp", parse_sockperf)
    for proto in ("tcp", "udp"):
        mode = f"{proto.upper()} 64 B, closed loop, --busy-poll"
        if "busy-poll" in na:
            rows.append(["prober", mode, "—", "not implemented yet", "", ""])
        else:
            tool_row("prober", mode, f"prober_{proto}_busypoll", parse_prober)
    pair("TCP 64 B, closed loop (qperf pair)", "prober_tcp_q", "qperf", "qperf_tcp", parse_qperf, qperf=True)
    pair("UDP 64 B, closed loop (qperf pair)", "prober_udp_q", "qperf", "qperf_udp", parse_qperf, qperf=True)
    pair("gRPC unary Ping 64 B, 1 in flight", "prober_grpc", "ghz", "ghz_grpc", parse_ghz)

    # Pacing table.
    pacing_rows = []
    for mode in ("timer", "spin", "hybrid"):
        res, fails = collect(out, rounds, f"pacing_{mode}", parse_prober)
        failures.extend(f"pacing {mode}: {f}" for f in fails)
        if not res:
            pacing_rows.append([mode, "—", f"failed: {fail_cell(fails)}", "", "", ""])
            continue
        cpu = med(res, "cpu")
        pacing_rows.append([
            mode, count_cell(res), us(med(res, "lag_p50")), us(med(res, "lag_p99")),
            us(med(res, "p50")), f"{cpu * 100:.1f} %" if cpu is not None else "—",
        ])

    # Conditional observations.
    ghz_res, _ = collect(out, rounds, "ghz_grpc", parse_ghz)
    g50 = med(ghz_res, "p50")
    if g50 is not None and g50 > 20_000:
        notes.append(
            f"ghz's median call took {us(g50)}, near the 40 ms of Linux's delayed ACK: that is the "
            "signature of a Nagle / delayed-ACK stall (a small write left unacknowledged holds the "
            "next one back), not of ghz itself. Check TCP_NODELAY on the responder's accepted gRPC "
            "sockets before reading this row as a comparison."
        )

    # Facts about the run.
    started = read(out / "started").strip() or "?"
    try:
        secs = int(read(out / "finished.s")) - int(read(out / "started.s"))
        took = f"{secs // 60} min {secs % 60} s"
    except ValueError:
        took = "?"
    cpu_model = "?"
    for line in read(Path("/proc/cpuinfo")).splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    osname = "?"
    for line in read(Path("/etc/os-release")).splitlines():
        if line.startswith("PRETTY_NAME="):
            osname = line.split("=", 1)[1].strip('"')
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load_start = " ".join(read(out / "loadavg.start").split()[:3]) or "?"
    load_end = " ".join(read(out / "loadavg.end").split()[:3]) or "?"
    versions = [ln for ln in read(out / "versions").splitlines() if ln.strip()]

    # Commands, in the order round 1 ran them.
    r1 = out / "r1"
    cmds = sorted(r1.glob("*.cmd"), key=lambda p: p.stat().st_mtime_ns) if r1.is_dir() else []
    root = str(Path(__file__).resolve().parents[2])
    cmd_lines = [read(p).strip().replace(root + "/", "") for p in cmds]

    md = []
    md.append("# Benchmarks: prober against peer tools\n")
    md.append(
        "> **One machine's figures from one run.** Latency on loopback depends on the CPU, its "
        "power states, the kernel and whatever else runs at the time; runs vary, even back to back "
        "on the same machine. Read the ratios within this run, not the absolute numbers across "
        "machines, and re-run `bash benches/peers/run.sh` before drawing conclusions.\n"
    )
    md.append("## Run\n")
    md.append(f"- Date: {started} (took {took})")
    md.append(f"- Machine: {cpu_model}; nproc {nproc}; kernel {platform.release()}; {osname}")
    md.append(f"- Load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end")
    md.append(f"- Rounds: {rounds}; each round runs prober (A), then the peer (B), for every row pair")
    if versions:
        md.append("- Versions: " + "; ".join(versions))
    md.append("- Everything talks to 127.0.0.1: prober's own responder (`prober serve`), "
              "`sockperf server`, `qperf`'s server, and the kernel for ICMP.\n")

    md.append("## Latency\n")
    md.append(
        "Round-trip times. p50 and p99 are the medians over the rounds of each round's "
        "percentile. The ratio, on each peer's row, is the median over the rounds of "
        "prober ÷ peer for that round (below 1: prober measured less).\n"
    )
    md.append("| tool | mode | count | p50 | p99 | ratio prober/peer |")
    md.append("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        md.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    md.append("")
    md.append(
        "1. ping prints only min/avg/max/mdev, so p50 and p99 come from its per-reply `time=` "
        "values (1 µs resolution), nearest rank."
    )
    md.append(
        "2. qperf gives no percentiles, only a one-way latency, which is half the mean round "
        "trip: the p50 column shows twice that, i.e. the mean round trip, and the ratio compares "
        "it with prober's mean round trip (shown in brackets on prober's row)."
    )
    md.append(
        "3. sockperf and qperf run for a fixed time (`-t 5`, `-t 3`), not a fixed count, so they "
        "take more samples than prober; sockperf leaves out its warm-up and the last moments "
        "(its \"valid duration\")."
    )
    md.append(
        "4. ghz is given `-n 10000` and a time cap, `-x 15s`; the count shows how many calls "
        "it made, and says when the cap stopped it first."
    )
    md.append("")

    md.append("## Pacing accuracy\n")
    md.append(
        "`prober run -i 10ms -c 500 --pacing MODE icmp://127.0.0.1`. Send lag is how late each "
        "probe left after its scheduled time. CPU is (user + sys) ÷ wall time of the prober "
        "process, from `/usr/bin/time` (100 % = one core). Medians over the rounds.\n"
    )
    md.append("| pacing | count | send-lag p50 | send-lag p99 | RTT p50 | CPU |")
    md.append("| --- | --- | --- | --- | --- | --- |")
    for row in pacing_rows:
        md.append("| " + " | ".join(row) + " |")
    md.append("")

    if notes or failures:
        md.append("## Notes\n")
        for n in notes:
            md.append(f"- {n}")
        for f in failures:
            md.append(f"- Failed: {f}")
        md.append("")

    md.append("## Commands\n")
    md.append(
        "Round 1, exactly as run (later rounds are the same). The ports are the ones the "
        "servers got on this run; `prober serve --quiet --tcp 127.0.0.1:0 --udp 127.0.0.1:0 "
        "--grpc 127.0.0.1:0` picks free ones, `sockperf server [--tcp] -i 127.0.0.1 -p PORT` "
        "and `qperf -lp PORT` get free ones from the script. Every command runs under "
        "`timeout`, and the prober ones also have `-d 30s` beside their count.\n"
    )
    md.append("```sh")
    md.extend(cmd_lines or ["(none recorded)"])
    md.append("```")
    md.append("")
    report.write_text("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
