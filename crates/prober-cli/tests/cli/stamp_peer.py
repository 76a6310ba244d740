#!/usr/bin/env python3
"""A minimal STAMP (RFC 8762) Session-Sender and Session-Reflector,
unauthenticated mode, written from the RFC alone, to test prober's STAMP
against something prober did not write.

  stamp_peer.py reflect PORT COUNT   answer COUNT requests (stateless), print
                                     "listening PORT" first
  stamp_peer.py send PORT COUNT      send COUNT requests (SSID 0x4242), print
                                     one JSON line per reply
"""
import json
import socket
import struct
import sys
import time

NTP_OFFSET = 2208988800
# Linux's IP_RECVTTL and IP_TTL (Python names only the second).
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)


def ntp_now():
    t = time.time_ns()
    secs, ns = divmod(t, 1_000_000_000)
    return ((secs + NTP_OFFSET) & 0xFFFFFFFF) << 32 | ((ns << 32) // 1_000_000_000)


def ntp_to_unix_ns(t):
    secs, frac = t >> 32, t & 0xFFFFFFFF
    return (secs - NTP_OFFSET) * 1_000_000_000 + (frac * 1_000_000_000 >> 32)


# Error Estimate: S=0, Z=0 (NTP), Scale 0, Multiplier 1.
ERR = 0x0001


def reflect(port, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
    s.bind(("127.0.0.1", port))
    print("listening", s.getsockname()[1], flush=True)
    s.settimeout(10)
    for _ in range(count):
        data, anc, _, addr = s.recvmsg(2048, 64)
        t2 = ntp_now()
        ttl = 0
        for level, kind, value in anc:
            if level == socket.IPPROTO_IP and kind == socket.IP_TTL:
                ttl = struct.unpack("i", value)[0]
        if len(data) < 44:
            continue
        seq, ts, err, ssid = struct.unpack("!IQHH", data[:16])
        # §4.3.1: Seq, Timestamp, Error Estimate, SSID, Receive Timestamp,
        # Session-Sender Seq, Timestamp, Error Estimate, MBZ, TTL, MBZ.
        base = struct.pack("!IQHHQIQHHB3x", seq, 0, ERR, ssid, t2, seq, ts, err, 0, ttl)
        t3 = ntp_now()
        base = base[:4] + struct.pack("!Q", t3) + base[12:]
        s.sendto(base + data[44:], addr)


def send(port, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    s.connect(("127.0.0.1", port))
    for seq in range(count):
        t1 = ntp_now()
        s.send(struct.pack("!IQHH28x", seq, t1, ERR, 0x4242))
        try:
            reply = s.recv(2048)
        except socket.timeout:
            print(json.dumps({"seq": seq, "lost": True}), flush=True)
            continue
        t4 = ntp_now()
        (rseq, t3, rerr, ssid, t2, sseq, sts, serr, _mbz, ttl) = struct.unpack(
            "!IQHHQIQHHB3x", reply[:44]
        )
        print(
            json.dumps(
                {
                    "seq": seq,
                    "len": len(reply),
                    "reflector_seq": rseq,
                    "ssid": ssid,
                    "sender_seq": sseq,
                    "sender_ts_echoed": sts == t1,
                    "ttl": ttl,
                    "rtt_ns": ntp_to_unix_ns(t4) - ntp_to_unix_ns(t1),
                    "turnaround_ns": ntp_to_unix_ns(t3) - ntp_to_unix_ns(t2),
                    "t2_after_t1_ns": ntp_to_unix_ns(t2) - ntp_to_unix_ns(t1),
                    "multiplier": rerr & 0xFF,
                }
            ),
            flush=True,
        )
        time.sleep(0.005)


if __name__ == "__main__":
    {"reflect": reflect, "send": send}[sys.argv[1]](int(sys.argv[2]), int(sys.argv[3]))
