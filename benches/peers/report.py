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


def json_output(d: Path, name: str) -> tuple[dict, str]:
    """The one JSON object a tool printed (ghz, floor, h2ping), and its
    stderr; a run that printed none failed."""
    out, err, rc = files(d, name)
    try:
        return json.loads(out), err
    except ValueError:
        raise timeout_or(rc, err, out) from None


def parse_prober(d: Path, name: str) -> dict:
    out, err, rc = files(d, name)
    summary, receive = None, None
    for line in out.splitlines():
        if '"summary"' in line or '"meta"' in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("type") == "summary":
                summary = obj
            elif obj.get("type") == "meta":
                receive = obj.get("receive")
    if summary is None or not summary.get("rtt"):
        raise timeout_or(rc, err, out)
    rtt, lag = summary["rtt"], summary.get("send_lag") or {}
    wake = summary.get("rx_wake") or {}
    ok, sent = summary.get("ok", 0), summary.get("sent", 0)
    res = {
        "p50": rtt["p50"] / 1e3,
        "p99": rtt["p99"] / 1e3,
        "mean": rtt["mean"] / 1e3,
        "count": str(sent) if ok == sent else f"{ok} ok of {sent}",
        "n": ok,
        "sent": sent,
        "lag_p50": lag.get("p50", math.nan) / 1e3,
        "lag_p99": lag.get("p99", math.nan) / 1e3,
        "wake_p50": wake["p50"] / 1e3 if "p50" in wake else None,
        "receive": receive,
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
    obj, err = json_output(d, name)
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
    secs = obj.get("total")  # wall time of the run, ns
    if isinstance(secs, (int, float)) and secs > 0:
        count += f" in {secs / 1e9:.1f} s"
    return {
        "p50": dist[50],
        "p99": dist[99],
        "mean": obj.get("average", 0) / 1e3,
        "count": count,
        "n": ok,
        "rps": float(obj.get("rps") or 0),  # over the run; meaningful with -n
    }


def parse_floor(d: Path, name: str) -> dict:
    """benches/src/bin/floor.rs: one JSON object, times in ns."""
    obj, _ = json_output(d, name)
    spin = obj["spin"]
    res = {
        "gaps_per_s": spin["gaps_per_s"],
        "lost_pct": spin["lost_fraction"] * 100,
        "gap_p50": spin["gap_p50"] / 1e3,
        "gap_p99": spin["gap_p99"] / 1e3,
        "sleep_p50": obj["sleep"]["wake_late_p50"] / 1e3,
        "sleep_p99": obj["sleep"]["wake_late_p99"] / 1e3,
    }
    for key in ("sleep_spin_80us", "sleep_spin_500us"):
        res[f"{key}_p50"] = obj[key]["late_p50"] / 1e3
        res[f"{key}_p99"] = obj[key]["late_p99"] / 1e3
    return res


def parse_prober_tp(d: Path, proto: str, clients: int, secs: float) -> dict:
    """TP_CLIENTS concurrent prober runs: summed replies per second."""
    ok = sent = 0
    p50s, fails = [], []
    for i in range(1, clients + 1):
        try:
            x = parse_prober(d, f"tp_{proto}_{i}")
        except Fail as e:
            fails.append(f"client {i}: {e}")
            continue
        ok += x["n"]
        sent += x["sent"]
        p50s.append(x["p50"])
    if not p50s:
        raise Fail("; ".join(fails) or "no client ran")
    return {
        "rps": ok / secs,
        "ok": ok,
        "sent": sent,
        "clients_ok": len(p50s),
        "p50": statistics.median(p50s),
        "fails": fails,
    }


def parse_h2ping(d: Path, name: str) -> dict:
    """crates/prober-grpc/examples/h2ping.rs: one JSON line, ns."""
    obj, _ = json_output(d, name)
    return {
        "p50": obj["p50_ns"] / 1e3,
        "p99": obj["p99_ns"] / 1e3,
        "mean": obj["mean_ns"] / 1e3,
        "count": str(obj["count"]),
        "n": obj["count"],
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
    if round(v) >= 1000:
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
        wake = med(res, "wake_p50")
        if wake is not None:
            p50_cell += f" (rx wake‡ {us(wake)})"
        if extra == "mean":
            p50_cell += f" (mean {us(med(res, 'mean'))})"
        rows.append([tool, mode, count_cell(res), p50_cell, us(p99), "—"])
        return res

    ratios: dict[str, float | None] = {}  # a_name -> median p50 ratio, for the targets
    spread: list[str] = []  # rows whose p50 varied more than 2x between rounds

    def pair(mode, a_name, peer, b_name, b_parser, qperf=False, peer_mode=None):
        peer_mode = peer_mode or mode
        tool_row("prober", mode, a_name, parse_prober, extra="mean" if qperf else None)
        if peer in na:
            rows.append([peer, peer_mode, "—", f"not available: {na[peer]}", "", ""])
            return
        b_res, fails = collect(out, rounds, b_name, b_parser)
        failures.extend(f"{peer} {peer_mode}: {f}" for f in fails)
        if not b_res:
            rows.append([peer, peer_mode, "—", f"not available: {fail_cell(fails)}", "", ""])
            return
        a_pr = per_round(out, rounds, a_name, parse_prober)
        b_pr = per_round(out, rounds, b_name, b_parser)
        if qperf:
            r_mean = ratio(a_pr, b_pr, "mean", "mean")
            rows.append([
                peer, peer_mode, count_cell(b_res),
                f"{us(med(b_res, 'mean'))} (2× mean)²", "—",
                f"mean {fmt_ratio(r_mean)}" if r_mean else "—",
            ])
            return
        r50, r99 = ratio(a_pr, b_pr, "p50", "p50"), ratio(a_pr, b_pr, "p99", "p99")
        ratios[a_name] = r50
        for tool, res_pr in (("prober", a_pr), (peer, b_pr)):
            p50s = [x["p50"] for x in res_pr if x and x.get("p50")]
            if len(p50s) >= 2 and max(p50s) > 2 * min(p50s):
                spread.append(
                    f"{tool}, {mode if tool == 'prober' else peer_mode}: p50 per round "
                    + ", ".join(us(v) for v in p50s)
                )
        cell = " · ".join(
            f"{k} {fmt_ratio(v)}" for k, v in (("p50", r50), ("p99", r99)) if v is not None
        ) or "—"
        rows.append([peer, peer_mode, count_cell(b_res), us(med(b_res, "p50")), us(med(b_res, "p99")), cell])

    pair("ICMP, 10 ms interval", "prober_icmp10", "ping", "ping_icmp10", parse_ping)
    pair("ICMP, back to back (-i 0)", "prober_icmp0", "ping", "ping_icmp0", parse_ping)
    pair("TCP 64 B, closed loop", "prober_tcp", "sockperf", "sockperf_tcp", parse_sockperf)
    pair("UDP 64 B, closed loop", "prober_udp", "sockperf", "sockperf_udp", parse_sockperf)
    busy_pairs = [
        ("tcp", "TCP 64 B, closed loop", "sockperf", "sockperf_tcp_busypoll", parse_sockperf,
         "client and responder spin"),
        ("udp", "UDP 64 B, closed loop", "sockperf", "sockperf_udp_busypoll", parse_sockperf,
         "client and responder spin"),
        ("icmp0", "ICMP, back to back (-i 0)", "ping", "ping_icmp0_busypoll", parse_ping,
         "prober's receiver spins"),
    ]
    for key, base, peer, b_name, b_parser, spins in busy_pairs:
        mode = f"{base}, --busy-poll ({spins})⁵"
        if "busy-poll" in na:
            rows.append(["prober", mode, "—", f"not available: {na['busy-poll']}", "", ""])
            continue
        pair(mode, f"prober_{key}_busypoll", peer, b_name, b_parser,
             peer_mode=f"{base}, re-run for the row above (nothing spins)⁵")
        for r, x in enumerate(per_round(out, rounds, f"prober_{key}_busypoll", parse_prober), 1):
            if x and x.get("receive") != "busy-poll":
                failures.append(
                    f"prober {base}, --busy-poll: round {r}: the meta line says "
                    f"receive={x.get('receive')!r}, not busy-poll"
                )
    pair("TCP 64 B, closed loop (qperf pair)", "prober_tcp_q", "qperf", "qperf_tcp", parse_qperf, qperf=True)
    pair("UDP 64 B, closed loop (qperf pair)", "prober_udp_q", "qperf", "qperf_udp", parse_qperf, qperf=True)
    pair("gRPC unary Ping 64 B, 1 in flight", "prober_grpc", "ghz", "ghz_grpc", parse_ghz)
    # Reference, not a peer: the least a client can do (raw h2 frames).
    h2_res, h2_fails = ([], []) if "h2ping" in na else collect(out, rounds, "h2_grpc", parse_h2ping)
    failures.extend(f"h2ping: {f}" for f in h2_fails)
    h2_vs_ghz = ratio(per_round(out, rounds, "h2_grpc", parse_h2ping),
                      per_round(out, rounds, "ghz_grpc", parse_ghz), "p50", "p50")
    if h2_res:
        rows.append([
            "h2ping†", "gRPC unary Ping 64 B, 1 in flight: minimal raw-HTTP/2 client (reference)",
            count_cell(h2_res), us(med(h2_res, "p50")), us(med(h2_res, "p99")),
            f"h2ping ÷ ghz p50 {fmt_ratio(h2_vs_ghz)}" if h2_vs_ghz else "—",
        ])

    # Pacing table.
    pacing_rows = []
    pacing: dict[str, dict] = {}  # mode -> lag_p99 (µs), cpu (fraction), for the targets
    for mode in ("timer", "spin", "hybrid"):
        res, fails = collect(out, rounds, f"pacing_{mode}", parse_prober)
        failures.extend(f"pacing {mode}: {f}" for f in fails)
        if not res:
            pacing_rows.append([mode, "—", "—", f"failed: {fail_cell(fails)}", "", "", ""])
            continue
        cpu = med(res, "cpu")
        pacing[mode] = {"lag_p99": med(res, "lag_p99"), "cpu": cpu}
        receive = sorted({str(x.get("receive") or "?") for x in res})
        pacing_rows.append([
            mode, " / ".join(receive), count_cell(res), us(med(res, "lag_p50")),
            us(med(res, "lag_p99")), us(med(res, "p50")),
            f"{cpu * 100:.1f} %" if cpu is not None else "—",
        ])

    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    # Platform floor, per round, medians.
    floor_res, floor_fails = ([], []) if "floor" in na else collect(out, rounds, "floor", parse_floor)
    failures.extend(f"floor: {f}" for f in floor_fails)
    floor = {k: med(floor_res, k) for k in floor_res[0]} if floor_res else {}

    # Responder throughput (once, after the rounds).
    tp_rows = []
    tp_conf = read(out / "throughput").split()
    if "ghz" in na:
        tp_rows.append(["gRPC unary Ping 64 B", "ghz -c 50 -n 100000", "—", f"not available: {na['ghz']}", "", ""])
    elif (out / "rtp" / "ghz_grpc_c50.rc").is_file():
        try:
            g = parse_ghz(out / "rtp", "ghz_grpc_c50")
            tp_rows.append(["gRPC unary Ping 64 B", "ghz -c 50 -n 100000", g["count"],
                            f"{g['rps']:,.0f}", us(g["p50"]), us(g["p99"])])
        except Exception as e:  # noqa: BLE001
            tp_rows.append(["gRPC unary Ping 64 B", "ghz -c 50 -n 100000", "—", f"failed: {e}", "", ""])
    if len(tp_conf) == 3:
        clients, lanes, secs = int(tp_conf[0]), int(tp_conf[1]), float(tp_conf[2])
        for proto in ("tcp", "udp"):
            who = f"{clients} × `prober run -i 0 -b {lanes} -d {secs:g}s`"
            try:
                t = parse_prober_tp(out / "rtp", proto, clients, secs)
            except Exception as e:  # noqa: BLE001
                tp_rows.append([f"{proto.upper()} 64 B", who, "—", f"failed: {e}", "", ""])
                continue
            failures.extend(f"throughput {proto}: {f}" for f in t["fails"])
            count = f"{t['ok']:,} ok of {t['sent']:,}" + (
                f" ({t['clients_ok']} of {clients} clients)" if t["clients_ok"] < clients else "")
            tp_rows.append([f"{proto.upper()} 64 B", who, count, f"{t['rps']:,.0f}",
                            f"{us(t['p50'])} (median of the clients' p50)", "—"])

    # --busy-poll against the same probe without it (both prober rows of this run).
    worse = []
    for busy, plain, label in (
        ("prober_tcp_busypoll", "prober_tcp", "TCP"),
        ("prober_udp_busypoll", "prober_udp", "UDP"),
        ("prober_icmp0_busypoll", "prober_icmp0", "ICMP -i 0"),
    ):
        b50 = med(collect(out, rounds, busy, parse_prober)[0], "p50")
        n50 = med(collect(out, rounds, plain, parse_prober)[0], "p50")
        if b50 is not None and n50 is not None and b50 > n50:
            worse.append(f"{label} {us(b50)} against {us(n50)}")

    # Targets, from this run's ratios and pacing figures.
    def verdict(ok: bool | None) -> str:
        return "no result" if ok is None else ("met" if ok else "not met")

    def ratio_target(key: str, limit: float) -> tuple[str, bool | None]:
        v = ratios.get(key)
        if v is None:
            return "—", None
        return f"{fmt_ratio(v)} ×", v <= limit

    targets = []
    shown, ok = ratio_target("prober_tcp", 1.0)
    targets.append(["TCP RR p50, default mode", "≤ 1.0 × sockperf TCP", f"p50 ratio {shown}", verdict(ok)])
    # What any pacer gets on this machine (the floor table), beside the pacing target.
    floor_cell = "—"
    if floor:
        floor_cell = (
            f"bare spin loop: off its CPU {floor['gaps_per_s']:.0f} times/s, gaps p50 "
            f"{us(floor['gap_p50'])}; perfect sleep + spin to each deadline (no I/O) p99: "
            f"{us(floor['sleep_spin_500us_p99'])} with a 500 µs margin (5 % of a core), "
            f"{us(floor['sleep_spin_80us_p99'])} with 80 µs; plain sleep wakes "
            f"{us(floor['sleep_p50'])} / {us(floor['sleep_p99'])} late (p50 / p99)"
        )
    t_shown, t_ok = ratio_target("prober_tcp_busypoll", 0.25)
    u_shown, u_ok = ratio_target("prober_udp_busypoll", 0.25)
    both = None if t_ok is None or u_ok is None else (t_ok and u_ok)
    targets.append([
        "TCP and UDP p50, busy-poll", "≤ 0.25 × sockperf",
        f"TCP {t_shown} ({verdict(t_ok)}); UDP {u_shown} ({verdict(u_ok)})", verdict(both),
    ])
    shown, ok = ratio_target("prober_icmp10", 1.0)
    targets.append(["ICMP p50 at 10 ms", "≤ 1.0 × ping -i 0.01", f"p50 ratio {shown}", verdict(ok)])
    shown, ok = ratio_target("prober_grpc", 0.5)
    ghz_p50 = med(collect(out, rounds, "ghz_grpc", parse_ghz)[0], "p50")
    grpc_verdict = verdict(ok)
    if ghz_p50 is not None and ghz_p50 > 20_000:
        grpc_verdict = "not comparable: ghz stalled (see Notes)"
    targets.append(["gRPC unary p50", "≤ 0.5 × ghz", f"p50 ratio {shown}", grpc_verdict,
                    f"a minimal raw-HTTP/2 client (h2ping) measured {fmt_ratio(h2_vs_ghz)} × ghz: "
                    "the server, kernel and wake-ups left when the client library costs nothing"
                    if h2_vs_ghz else "—"])
    spin, hyb = pacing.get("spin", {}), pacing.get("hybrid", {})
    spin_ok = None if spin.get("lag_p99") is None else spin["lag_p99"] <= 5
    hyb_lag_ok = None if hyb.get("lag_p99") is None else hyb["lag_p99"] <= 20
    hyb_cpu_ok = None if hyb.get("cpu") is None else hyb["cpu"] <= 0.05
    parts = [spin_ok, hyb_lag_ok, hyb_cpu_ok]
    all_ok = None if None in parts else all(parts)
    hyb_cpu = f"{hyb['cpu'] * 100:.1f} %" if hyb.get("cpu") is not None else "—"
    targets.append([
        "pacing send-lag p99", "spin ≤ 5 µs; hybrid ≤ 20 µs with ≤ 5% of a core",
        f"spin {us(spin.get('lag_p99'))} ({verdict(spin_ok)}); hybrid {us(hyb.get('lag_p99'))} "
        f"({verdict(hyb_lag_ok)}) at {hyb_cpu} CPU ({verdict(hyb_cpu_ok)})",
        verdict(all_ok),
        floor_cell,
    ])
    for row in targets:
        if len(row) == 4:
            row.append("—")

    # Conditional observations.
    if spread:
        notes.append(
            "p50 varied more than twofold between rounds on these rows, so the ratios (and "
            "target verdicts) that use them rest on which rounds were slow: "
            + "; ".join(s_.replace("⁵", "") for s_ in spread) + "."
        )
    timer_lag, spin_lag = pacing.get("timer", {}).get("lag_p99"), pacing.get("spin", {}).get("lag_p99")
    spin_cpu = pacing.get("spin", {}).get("cpu")
    if timer_lag is not None and spin_lag is not None and spin_lag > timer_lag:
        notes.append(
            f"`--pacing spin` had a worse send-lag p99 ({us(spin_lag)}) than `timer` "
            f"({us(timer_lag)}). On 4 or more CPUs it implies `--busy-poll`, so a spinning sender and a spinning "
            f"receiver ran at once (CPU {spin_cpu * 100:.0f} % of one core) on a machine with "
            f"{nproc} vCPU{'s' if nproc != 1 else ''}: "
            "with both cores taken, the sending thread can be preempted, the likely cause."
            if spin_cpu is not None else
            f"`--pacing spin` had a worse send-lag p99 ({us(spin_lag)}) than `timer` ({us(timer_lag)})."
        )
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
    load_start = " ".join(read(out / "loadavg.start").split()[:3]) or "?"
    load_end = " ".join(read(out / "loadavg.end").split()[:3]) or "?"
    versions = [ln for ln in read(out / "versions").splitlines() if ln.strip()]

    # Commands, in the order round 1 ran them.
    r1 = out / "r1"
    order = [n for n in read(r1 / "order").split() if (r1 / f"{n}.cmd").is_file()]
    if order:
        cmds = [r1 / f"{n}.cmd" for n in order]
    else:  # raw outputs from before the order file: file times
        cmds = sorted(r1.glob("*.cmd"), key=lambda p: p.stat().st_mtime_ns) if r1.is_dir() else []
    rtp = out / "rtp"
    cmds += [rtp / f"{n}.cmd" for n in read(rtp / "order").split() if (rtp / f"{n}.cmd").is_file()]
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
        "3. sockperf, qperf and ghz run for a fixed time (`-t 5`, `-t 3`, `-z 4s`), not a "
        "fixed count, so their sample counts differ from prober's; sockperf leaves out its "
        "warm-up and the last moments (its \"valid duration\")."
    )
    md.append(
        "4. ghz runs for a fixed time because it cannot cap a count run by time: in ghz "
        "v0.93.0 `-x` (documented as a time cap with `-n` respected) sets `-z`, so `-n` is "
        "ignored and every run lasts the whole `-x`."
    )
    md.append(
        "5. Busy-poll pairs. prober's rows run `prober run --busy-poll -i 0`: a thread spins on "
        "the socket for the replies instead of a task sleeping in epoll. For TCP and UDP the "
        "responder is a separate `prober serve --busy-poll` (started for that row only, on its "
        "own port, and stopped after it), whose thread spins on the socket too; so both ends "
        "spin. For ICMP only prober's receiving thread spins (the kernel answers). The peer rows "
        "use the peers' defaults, where nothing spins (sockperf's client and server wait in "
        "epoll, ping waits in the kernel); they are run again right after prober's row, with "
        "the spinning responder stopped, and the ratio is against that re-run."
    )
    if worse:
        md.append(
            "6. **--busy-poll measured worse than the default here** (p50, --busy-poll against "
            "the same probe without it, this run): " + "; ".join(worse) + f". This machine has "
            f"{nproc} vCPU{'s' if nproc != 1 else ''}. In the TCP and UDP pairs the spinning "
            "client thread and the spinning responder thread take a core each, which leaves no "
            "idle core for everything else (prober's tokio task that sends the next probe, the "
            "kernel's loopback work), so that runs only when the "
            "scheduler preempts a spinner. In every pair the spinning thread hands each reply to "
            "that tokio task, which in a closed loop is waiting for it and has to be woken. "
            "Busy polling needs a spare core per spinning thread to pay off."
        )
    if any("rx wake" in r[3] for r in rows):
        md.append("")
        md.append(
            "‡ rx wake: the median over the rounds of the p50 of prober's receive wake-up, "
            "from the kernel's receive timestamp of a reply to prober reading it (`rx_wake` "
            "in the summary). A TCP or UDP round trip includes it; an ICMP one, timed by the kernel "
            "as ping's is, does not. It is the part of a round trip that is the receiving "
            "side's wake-up rather than the network and the responder."
        )
    if h2_res:
        md.append("")
        md.append(
            "† h2ping (`crates/prober-grpc/examples/h2ping.rs`) is not a peer but a reference: "
            "unary `Ping` written as raw HTTP/2 frames with the `h2` crate (what tonic and hyper "
            "use underneath), no tonic or tower, one closed loop on one thread, HEADERS and DATA "
            "in one write. Against the same responder it shows what is left of a gRPC round trip "
            "when the client library costs next to nothing."
        )
    md.append("")

    md.append("## Pacing accuracy\n")
    md.append(
        "`prober run -i 10ms -c 500 --pacing MODE icmp://127.0.0.1`. Send lag is how late each "
        "probe left after its scheduled time. CPU is (user + sys) ÷ wall time of the prober "
        "process, from `/usr/bin/time` (100 % = one core). Medians over the rounds. Receive is "
        "the `receive` field of prober's JSON meta line (`--pacing spin` implies `--busy-poll` only on machines with 4 or more CPUs).\n"
    )
    md.append("| pacing | receive | count | send-lag p50 | send-lag p99 | RTT p50 | CPU |")
    md.append("| --- | --- | --- | --- | --- | --- | --- |")
    for row in pacing_rows:
        md.append("| " + " | ".join(row) + " |")
    md.append("")

    md.append("## Platform floor\n")
    md.append(
        "What this machine allows any pacer, without prober and without I/O "
        "(`target/release/floor 2 200`, from `benches/src/bin/floor.rs`, once per round; "
        "medians over the rounds). A thread spinning on the clock for 2 s records every gap "
        "longer than 2 µs between two reads (the thread was off its CPU: interrupts, the "
        "hypervisor). Then 200 deadlines 10 ms apart: a plain sleep to each, and a sleep to a "
        "margin before each followed by a spin to it; \"late\" is how far past the deadline "
        "the loop got, i.e. the send lag of a pacer with no work to do.\n"
    )
    if floor:
        md.append("| measure | p50 | p99 | other |")
        md.append("| --- | --- | --- | --- |")
        md.append(f"| spin loop: gaps > 2 µs | {us(floor['gap_p50'])} | {us(floor['gap_p99'])} | "
                  f"{floor['gaps_per_s']:.0f} per s, {floor['lost_pct']:.2f} % of the time |")
        md.append(f"| plain sleep: wake-up lateness | {us(floor['sleep_p50'])} | {us(floor['sleep_p99'])} | — |")
        md.append(f"| sleep to 80 µs before, then spin: lateness | {us(floor['sleep_spin_80us_p50'])} | "
                  f"{us(floor['sleep_spin_80us_p99'])} | — |")
        md.append(f"| sleep to 500 µs before, then spin: lateness | {us(floor['sleep_spin_500us_p50'])} | "
                  f"{us(floor['sleep_spin_500us_p99'])} | spins about 5 % of a core |")
    else:
        md.append(f"Not measured: {na.get('floor') or fail_cell(floor_fails)}")
    md.append("")

    md.append("## Responder throughput\n")
    md.append(
        "Requests per second answered by `prober serve` (the same responder as above) with many "
        "requests in flight, measured once after the rounds. The load generators run on the "
        "same machine and take CPU from the responder, so these are lower bounds for the "
        "responder on its own; with 2 vCPUs they are mostly a measure of the whole box.\n"
    )
    if tp_rows:
        md.append("| protocol | load | count | requests/s | p50 | p99 |")
        md.append("| --- | --- | --- | --- | --- | --- |")
        for row in tp_rows:
            md.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    else:
        md.append("Not measured in this run.")
    md.append("")

    md.append("## Targets\n")
    md.append(
        "The project's targets, checked against this run: the ratios are the p50 ratios of the "
        "latency table (median over the rounds of prober ÷ peer), the pacing figures the "
        "medians of the pacing table. One run on one machine: a verdict can flip on a re-run "
        "when the figure is near its target.\n"
    )
    md.append("| measure | target | this run | result | this machine's floor (same run) |")
    md.append("| --- | --- | --- | --- | --- |")
    for row in targets:
        md.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
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
        "Round 1, exactly as run (later rounds are the same), then the throughput runs. The ports are the ones the "
        "servers got on this run; `prober serve --quiet --tcp 127.0.0.1:0 --udp 127.0.0.1:0 "
        "--grpc 127.0.0.1:0` picks free ones (so does each `prober serve --busy-poll`, started "
        "for one row and stopped after it), `sockperf server [--tcp] -i 127.0.0.1 -p PORT` "
        "and `qperf -lp PORT` get free ones from the script. Every command runs under "
        "`timeout`, and the prober ones also have `-d 30s` beside their count.\n"
    )
    md.append("```sh")
    md.extend(cmd_lines or ["(none recorded)"])
    md.append("```")
    md.append("")
    # Sections other scripts write (benches/stamps/cost.sh) follow a marker
    # and are kept when this report is written again.
    marker = "<!-- sections below are not written by benches/peers -->"
    if report.exists():
        old = report.read_text()
        if marker in old:
            md.append(marker + old.split(marker, 1)[1].rstrip("\n"))
            md.append("")
    report.write_text("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
