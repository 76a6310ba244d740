#!/usr/bin/env python3
"""Kernel RTT minus the capture's RTT, per probe, for floor.sh.

usage: excess.py CAPTURE.pcap (prober JSON lines | floor_ping.py lines)
Prints: matched, median and p99 excess in ns.
"""
import json
import struct
import sys


def capture(path):
    data = open(path, "rb").read()
    assert struct.unpack("<I", data[:4])[0] == 0xA1B23C4D, "a nanosecond pcap"
    link = struct.unpack("<I", data[20:24])[0]
    off, seen = 24, {}
    while off + 16 <= len(data):
        sec, ns, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        off += 16
        b = data[off:off + incl]
        off += incl
        if link == 1:
            b = b[14:]
        if b[0] >> 4 == 4:
            icmp = b[(b[0] & 15) * 4:]
            reply = icmp[0] == 0
        else:
            icmp = b[40:]
            reply = icmp[0] == 129
        if len(icmp) < 28:
            continue
        seq = struct.unpack(">Q", icmp[8 + 12:8 + 20])[0]
        seen.setdefault((reply, seq), sec * 10**9 + ns)
    return seen


def main():
    seen = capture(sys.argv[1])
    excess = []
    for line in open(sys.argv[2]):
        if line.startswith("{"):
            p = json.loads(line)
            if p.get("type") != "probe" or p.get("kernel_rtt_ns") is None:
                continue
            seq, kernel = p["seq"], p["kernel_rtt_ns"]
        else:
            seq, t1k, t4k = map(int, line.split())
            kernel = t4k - t1k
        if (False, seq) in seen and (True, seq) in seen:
            excess.append(kernel - (seen[(True, seq)] - seen[(False, seq)]))
    excess.sort()
    n = len(excess)
    print(n, excess[n // 2], excess[min(n - 1, int(n * 0.99))])


if __name__ == "__main__":
    main()
