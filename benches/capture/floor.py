"""Matches floor.c's probes to a nanosecond pcap of them; prints the median
kernel RTT − capture RTT, and the median request capture − user send."""
import struct
import sys

b = open(sys.argv[1], "rb").read()
assert struct.unpack("<I", b[:4])[0] == 0xA1B23C4D, "a nanosecond pcap"
i, caps = 24, {}
while i + 16 <= len(b):
    s, ns, n = struct.unpack("<III", b[i : i + 12])
    pkt = b[i + 16 : i + 16 + n]
    i += 16 + n
    icmp = pkt[14 + (pkt[14] & 15) * 4 :]
    m = icmp.find(b"PRBI")
    if m >= 0:
        seq = struct.unpack(">Q", icmp[m + 12 : m + 20])[0]
        caps.setdefault((icmp[0] == 0, seq), s * 10**9 + ns)
excess, send = [], []
for line in open(sys.argv[2]):
    seq, t1k, t4k, t1 = map(int, line.split())
    req, rep = caps.get((False, seq)), caps.get((True, seq))
    if req and rep and t1k:
        excess.append((t4k - t1k) - (rep - req))
        send.append(req - t1)
med = lambda v: sorted(v)[len(v) // 2]
print(f"{len(excess)} probes; kernel rtt − capture rtt median {med(excess)} ns; "
      f"request capture − user send median {med(send)} ns")
