#!/usr/bin/env python3
"""Writes a synthetic `prober run -o json` file: N probes per target, T
targets, lognormal RTTs with a slow tail, 0.1 % timeouts, and every part of
the split, the same line layout as prober's JSON sink (schema 2)."""
import math, random, sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
targets = int(sys.argv[2]) if len(sys.argv) > 2 else 4
out = sys.stdout
rnd = random.Random(1)
t0 = 1_795_000_000_000_000_000
names = [f"tcp://10.0.0.{i + 1}:8707" for i in range(targets)]
tl = ",".join(
    f'{{"id":{i},"target":"{t}","protocol":"tcp","addr":"10.0.0.{i + 1}:8707","size":64,"timestamps":"user"}}'
    for i, t in enumerate(names))
out.write('{"type":"meta","schema":2,"version":"0.1.0","hostname":"bench","kernel":"6.1","start_unix_ns":%d,'
          '"interval_ns":1000000,"pacing":"timer","receive":"async","burst":1,"count":%d,"duration_ns":null,'
          '"size":null,"timeout_ns":1000000000,"warmup":0,"targets":[%s]}\n' % (t0, n, tl))
w = out.write
for seq in range(n):
    for i, t in enumerate(names):
        sent = t0 + seq * 1_000_000 + i * 250_000
        if rnd.random() < 0.001:
            w(f'{{"type":"probe","target":"{t}","protocol":"tcp","addr":"10.0.0.{i + 1}:8707","seq":{seq},'
              f'"outcome":"timeout","scheduled_unix_ns":{sent},"sent_unix_ns":{sent},"send_lag_ns":900,'
              f'"rtt_ns":null,"latency_ns":null,"server_dwell_ns":null,"bytes":64,"error":null,'
              f'"error_kind":null,"rx_wake_ns":null,"ttl":null,"kernel_rtt_ns":null,"ping_rtt_ns":null}}\n')
            continue
        net = int(rnd.lognormvariate(math.log(20_000 * (i + 1)), 0.3))
        if rnd.random() < 0.01:
            net += int(rnd.expovariate(1 / 500_000))
        cs, rw, rd, rs, cw = (rnd.randint(2000, 6000), rnd.randint(3000, 30000), rnd.randint(300, 2000),
                              rnd.randint(1000, 4000), rnd.randint(5000, 40000))
        rtt = cs + net + rw + rd + rs + cw
        w(f'{{"type":"probe","target":"{t}","protocol":"tcp","addr":"10.0.0.{i + 1}:8707","seq":{seq},'
          f'"outcome":"ok","scheduled_unix_ns":{sent},"sent_unix_ns":{sent + 900},"send_lag_ns":900,'
          f'"rtt_ns":{rtt},"latency_ns":{rtt + 900},"server_dwell_ns":{rd},"bytes":64,"error":null,'
          f'"error_kind":null,"rx_wake_ns":{cw},"ttl":null,"kernel_rtt_ns":{rtt - cs - cw},"ping_rtt_ns":{rtt - cw},'
          f'"parts":{{"client_send_ns":{cs},"network_ns":{net},"responder_wake_ns":{rw},'
          f'"responder_dwell_ns":{rd},"responder_send_ns":{rs},"client_wake_ns":{cw}}}}}\n')
