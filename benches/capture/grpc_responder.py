#!/usr/bin/env python3
"""The gRPC responder's three parts (wake + dwell + send, t3k - t2k) of
each probe against a capture: the response's first data segment minus the
request's last, on loopback. Usage: grpc_responder.py PCAP PROBES.jsonl PORT
(benches/capture/grpc_responder.sh runs it)."""
import json, sys
# A nanosecond pcap of lo (link type EN10MB, or Linux cooked).
import struct
pcap, jsonf, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
d=open(pcap,'rb').read()
magic=struct.unpack('<I',d[:4])[0]
assert magic==0xa1b23c4d, hex(magic)
lt=struct.unpack('<I',d[20:24])[0]
off=24; pk=[]
while off+16<=len(d):
    s,ns,incl,orig=struct.unpack('<IIII',d[off:off+16]); off+=16
    b=d[off:off+incl]; off+=incl
    if lt==1: b=b[14:]
    elif lt==113: b=b[16:]
    if b[0]>>4!=4: continue
    ihl=(b[0]&15)*4; tot=struct.unpack('>H',b[2:4])[0]
    tcp=b[ihl:]; sp,dp=struct.unpack('>HH',tcp[:4]); doff=(tcp[12]>>4)*4
    plen=tot-ihl-doff
    if plen<=0: continue
    t=s*10**9+ns
    pk.append((t, dp==port))
P=[json.loads(l) for l in open(jsonf) if '"probe"' in l]
P=[p for p in P if p.get('type')=='probe']
diffs=[]
for p in P:
    parts=p.get('parts',{})
    if not all(k in parts for k in ('responder_wake_ns','responder_dwell_ns','responder_send_ns')): continue
    sent=p['sent_unix_ns']-200000
    resp=next((i for i,(t,c2s) in enumerate(pk) if not c2s and t>=sent),None)
    if resp is None: continue
    req=next((pk[j] for j in range(resp-1,-1,-1) if pk[j][1] and pk[j][0]>=sent),None)
    if req is None: continue
    cap=pk[resp][0]-req[0]
    ours=parts['responder_wake_ns']+parts['responder_dwell_ns']+parts['responder_send_ns']
    diffs.append(ours-cap)
diffs.sort()
n=len(diffs)
print(n,'probes; (wake+dwell+send) - (response capture - request capture): min %d p10 %d median %d p90 %d max %d ns'%(diffs[0],diffs[n//10],diffs[n//2],diffs[9*n//10],diffs[-1]))
