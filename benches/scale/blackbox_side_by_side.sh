#!/usr/bin/env bash
# Same targets, same run: blackbox_exporter and prober /probe, alternated, 20 rounds; medians of probe_duration_seconds.
set -e
# Loopback only; needs prometheus-blackbox-exporter and a release build.
#   bash benches/scale/blackbox_side_by_side.sh
P=${PROBER:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/prober}
work=$(mktemp -d); cd "$work"
cat > sbs.yml <<Y
modules:
  http_2xx: {prober: http, timeout: 3s, http: {preferred_ip_protocol: ip4}}
  tcp_connect: {prober: tcp, timeout: 3s}
  icmp: {prober: icmp, timeout: 3s, icmp: {preferred_ip_protocol: ip4}}
  grpc_plain: {prober: grpc, timeout: 3s, grpc: {tls: false}}
Y
$P serve --quiet --http 127.0.0.1:0 --tcp 127.0.0.1:0 --grpc 127.0.0.1:0 > r.log 2>&1 & R=$!
prometheus-blackbox-exporter --config.file sbs.yml --web.listen-address 127.0.0.1:19116 > /dev/null 2>&1 & B=$!
$P serve --metrics 127.0.0.1:19708 --blackbox-config sbs.yml > p.log 2>&1 & Q=$!
sleep 1.5
HTTP=$(awk '/listening http/ {print $3}' r.log); TCP=$(awk '/listening tcp/ {print $3}' r.log); GRPC=$(awk '/listening grpc/ {print $3}' r.log)
for c in "http_2xx http://$HTTP/echo" "tcp_connect $TCP" "icmp 127.0.0.1" "grpc_plain $GRPC"; do
  set -- $c
  for i in $(seq 20); do
    b=$(curl -s "http://127.0.0.1:19116/probe?module=$1&target=$2" | awk '/^probe_duration_seconds/ {print $2}')
    p=$(curl -s "http://127.0.0.1:19708/probe?module=$1&target=$2" | awk '/^probe_duration_seconds/ {print $2}')
    echo "$1 $b $p"
  done
done > sbs.out
kill $R $B $Q
python3 - <<'PY'
import statistics as st
rows={}
for l in open('sbs.out'):
    m,b,p=l.split(); rows.setdefault(m,[]).append((float(b),float(p)))
for m,v in rows.items():
    b=st.median(x for x,_ in v)*1e6; p=st.median(y for _,y in v)*1e6
    print(f"| {m} | {len(v)} | {b:.0f} µs | {p:.0f} µs | {p/b:.2f} |")
PY
