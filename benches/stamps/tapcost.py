#!/usr/bin/env python3
"""What an open packet socket costs a TCP connect on loopback, with prober not
running: medians of 3,000 connects, 9 rounds, with no packet socket, with one
whose filter passes nothing (as prober_net::syntap, which passes only SYNs),
and with that and PACKET_IGNORE_OUTGOING. prober uses such a socket only where
the kernel refuses its BPF program (prober_net::synbpf); benches/src/bin/hookcost.rs
compares the two as prober opens them. Run as root: python3 benches/stamps/tapcost.py"""
import socket, time, statistics as st, ctypes, struct
ETH_P_ALL=3; PACKET_IGNORE_OUTGOING=23; SO_ATTACH_FILTER=26
srv=socket.socket(); srv.bind(("127.0.0.1",0)); srv.listen(4096)
port=srv.getsockname()[1]
def run(n):
    ts=[]
    for _ in range(n):
        c=socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii",1,0))
        t=time.perf_counter_ns(); c.connect(("127.0.0.1",port)); ts.append(time.perf_counter_ns()-t)
        a,_=srv.accept(); a.close(); c.close()
    return st.median(ts)
prog=ctypes.create_string_buffer(struct.pack("HBBI",6,0,0,0))  # ret 0: drop all
fprog=struct.pack("HxxxxxxQ",1, ctypes.addressof(prog))
def tap(ignore):
    s=socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    if ignore: s.setsockopt(263, PACKET_IGNORE_OUTGOING, 1)
    return s
res={"none":[],"tap (drop-all filter)":[],"tap, ignore outgoing":[]}
for r in range(9):
    for i,k in enumerate(res):
        s=tap(i==2) if i else None
        res[k].append(run(3000))
        if s: s.close()
for k,v in res.items(): print(k, [int(x) for x in v], "median", int(st.median(v)))
