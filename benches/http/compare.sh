#!/usr/bin/env bash
# prober http(s):// against h2load and curl, one server (nginx from the
# Debian packages, a static 64-byte file), on loopback, alternating A and B
# in one run; medians of ROUNDS rounds. Not run in CI (timing).
#
#   benches/http/compare.sh [ROUNDS] [REQUESTS]
#
# Needs: nginx, nghttp2-client (h2load), curl, openssl; a release build of
# prober (cargo build --release -p prober-cli).
set -euo pipefail
ROUNDS=${1:-5}
N=${2:-10000}
cd "$(dirname "$0")/../.."
PROBER=${PROBER:-target/release/prober}
dir=$(mktemp -d)
trap 'nginx -p "$dir" -c nginx.conf -s stop 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/www" "$dir/logs"
head -c 64 /dev/zero | tr '\0' x > "$dir/www/echo"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log;
events { worker_connections 256; }
http {
  access_log off;
  keepalive_requests 1000000;
  server { listen 127.0.0.1:18081; root $dir/www; }
  server { listen 127.0.0.1:18082 http2; root $dir/www; }
  server { listen 127.0.0.1:18443 ssl http2; root $dir/www;
           ssl_certificate $dir/cert.pem; ssl_certificate_key $dir/key.pem; }
}
CONF
nginx -p "$dir" -c nginx.conf
sleep 0.3

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# h2load's mean time per request (µs), from its "time for request" line.
h2load_mean() { h2load "$@" 2>/dev/null | awk '/time for request:/ {v=$5; u=v; gsub(/[0-9.]/,"",u); gsub(/[a-z]/,"",v); print (u=="ms" ? v*1000 : v)}'; }
prober_p50() { "$PROBER" run -q -c "$N" -i 0 -o json "$@" | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d["type"]=="summary": print(d["rtt"]["p50"]/1000)'; }

for case in h1 h2c h2tls; do
  : > "$dir/$case.prober"; : > "$dir/$case.h2load"
done
for r in $(seq "$ROUNDS"); do
  prober_p50 http://127.0.0.1:18081/echo >> "$dir/h1.prober"
  h2load_mean -n "$N" -c 1 -m 1 --h1 http://127.0.0.1:18081/echo >> "$dir/h1.h2load"
  prober_p50 h2c://127.0.0.1:18082/echo >> "$dir/h2c.prober"
  h2load_mean -n "$N" -c 1 -m 1 http://127.0.0.1:18082/echo >> "$dir/h2c.h2load"
  prober_p50 --insecure https://127.0.0.1:18443/echo >> "$dir/h2tls.prober"
  h2load_mean -n "$N" -c 1 -m 1 https://127.0.0.1:18443/echo >> "$dir/h2tls.h2load"
done
# curl: one connection, many URLs; its time_total per transfer.
urls=$(for i in $(seq 200); do printf 'http://127.0.0.1:18081/echo '; done)
curl_mean=$(curl -s -o /dev/null -w '%{time_total}\n' $urls | awk '{s+=$1} END {printf "%.1f", s/NR*1e6}')

printf '| server: nginx, 64-byte file | prober p50 (µs) | h2load mean (µs) | prober / h2load |\n|---|---|---|---|\n'
for case in h1 h2c h2tls; do
  p=$(median < "$dir/$case.prober"); h=$(median < "$dir/$case.h2load")
  printf '| %s | %.1f | %.1f | %.2f |\n' "$case" "$p" "$h" "$(echo "$p / $h" | bc -l)"
done
echo "curl -w time_total, HTTP/1.1, one connection, 200 URLs: mean ${curl_mean} µs"
echo "(medians of $ROUNDS rounds of $N requests each, prober and h2load alternating; $(nproc) CPUs)"
