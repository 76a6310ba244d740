#!/usr/bin/env python3
"""The kernel's own floor for prober's ICMP capture check.

Sends ICMP echo requests to 127.0.0.1 on a raw socket with the same kernel
transmit stamp prober asks for (SO_TIMESTAMPING, TX software, packet copy
on the error queue) and reads the reply's receive stamp (SO_TIMESTAMPNS),
with no runtime, no epoll and no other thread. Prints "seq t1k t4k" per
probe, for floor.sh to match against a capture. Whatever excess of the
kernel RTT over the capture's RTT this shows is the kernel's path between
the transmit stamp (skb_tx_timestamp in loopback_xmit) and the capture tap
(netif_rx), not prober's.

usage: floor_ping.py COUNT INTERVAL_SECONDS
"""
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = 35
SO_TIMESTAMPING = 37
TX_SOFTWARE, SOFTWARE = 1 << 1, 1 << 4


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def main():
    count, interval = int(sys.argv[1]), float(sys.argv[2])
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, TX_SOFTWARE | SOFTWARE)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    ident = 0x5052
    for seq in range(count):
        # prober's payload layout: magic, nonce, seq (capture.py reads seq).
        payload = struct.pack(">4sQQ", b"PRBI", 7, seq) + bytes(36)
        head = struct.pack("!BBHHH", 8, 0, 0, ident, seq & 0xFFFF)
        pkt = struct.pack("!BBHHH", 8, 0, checksum(head + payload), ident, seq & 0xFFFF) + payload
        s.sendto(pkt, ("127.0.0.1", 0))
        t4k = None
        while t4k is None:
            data, anc, _, _ = s.recvmsg(2048, 256)
            icmp = data[(data[0] & 15) * 4:]
            if icmp[0] != 0 or struct.unpack(">Q", icmp[8 + 12:8 + 20])[0] != seq:
                continue
            for _, kind, d in anc:
                if kind == SO_TIMESTAMPNS:
                    sec, ns = struct.unpack("qq", d)
                    t4k = sec * 10**9 + ns
        t1k = None
        while t1k is None:
            try:
                _, anc, _, _ = s.recvmsg(2048, 512, socket.MSG_ERRQUEUE)
            except BlockingIOError:
                continue
            for _, kind, d in anc:
                if kind == SO_TIMESTAMPING:
                    sec, ns = struct.unpack("qq", d[:16])
                    t1k = sec * 10**9 + ns
        print(seq, t1k, t4k)
        time.sleep(interval)


if __name__ == "__main__":
    main()
