#!/usr/bin/env bash
# prober's http(s):// and dns:// against the tools people use for them, on
# loopback, in one run, alternating A and B by round; medians of ROUNDS.
# Not run in CI (timing).
#
#   benches/http/compare.sh [ROUNDS] [REQUESTS]
#
# - nginx (Debian) serving a 64-byte file over HTTP/1.1, h2c and HTTPS (h2):
#   prober p50 against h2load's mean time per request (-c 1 -m 1), and
#   curl's time_total over one connection;
# - blackbox_exporter's http module against prober --new-connection, phase
#   by phase (both open a connection per probe);
# - dnsmasq answering an A record: prober dns:// p50 against blackbox's dns
#   module (probe_dns_lookup_time_seconds).
#
# Needs nginx, nghttp2-client (h2load), curl, openssl, dnsmasq,
# prometheus-blackbox-exporter, python3, and a release build of prober
# (cargo build --release -p prober-cli).
set -euo pipefail
ROUNDS=${1:-5}
N=${2:-10000}
BB_N=${BB_N:-300}
cd "$(dirname "$0")/../.."
PROBER=${PROBER:-$PWD/target/release/prober}
dir=$(mktemp -d)
chmod 755 "$dir"  # nginx workers run as www-data
pids=()
cleanup() {
  nginx -p "$dir" -c nginx.conf -s stop 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
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
echo "192.0.2.10 www.test.lan" > "$dir/hosts"
dnsmasq --keep-in-foreground --port=18053 --listen-address=127.0.0.1 --bind-interfaces \
  --no-resolv --no-hosts --addn-hosts="$dir/hosts" --pid-file="$dir/dnsmasq.pid" \
  --log-facility=- >/dev/null 2>&1 &
pids+=($!)
cat > "$dir/blackbox.yml" <<'YML'
modules:
  http_h1:
    prober: http
    timeout: 2s
    http:
      preferred_ip_protocol: ip4
  dns_a:
    prober: dns
    timeout: 2s
    dns:
      query_name: www.test.lan
      query_type: A
      transport_protocol: udp
      preferred_ip_protocol: ip4
YML
prometheus-blackbox-exporter --config.file="$dir/blackbox.yml" \
  --web.listen-address=127.0.0.1:19115 >/dev/null 2>&1 &
pids+=($!)
sleep 1

# The median of column COL (1 by default) of standard input.
median() { python3 -c 'import sys,statistics; c=int(sys.argv[1])-1; print(statistics.median(float(l.split()[c]) for l in sys.stdin if l.strip()))' "${1:-1}"; }
# h2load's mean time per request (min, max, mean, sd follow the label), µs.
h2load_mean() {
  h2load "$@" 2>/dev/null | awk '/time for request:/ {v=$6; u=v; gsub(/[0-9.]/,"",u); gsub(/[a-z]/,"",v); print (u=="ms" ? v*1000 : (u=="s" ? v*1e6 : v))}'
}
# The RTT p50 and mean of prober's only target, µs.
prober_rtt() {
  "$PROBER" run -q -o json "$@" | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d['type']=='summary':
        print(d['rtt']['p50']/1000, d['rtt']['mean']/1000)"
}
# blackbox: BB_N probes of MODULE TARGET; the median of each metric, µs.
blackbox() { # MODULE TARGET
  python3 - "$1" "$2" "$BB_N" <<'PY'
import re, statistics, sys, urllib.parse, urllib.request
module, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
url = "http://127.0.0.1:19115/probe?" + urllib.parse.urlencode({"module": module, "target": target})
vals = {}
for _ in range(n):
    text = urllib.request.urlopen(url).read().decode()
    for m in re.finditer(r'^probe_(http_|dns_|)duration_seconds(?:\{phase="(\w+)"\})? (\S+)$', text, re.M):
        key = m.group(1) + (m.group(2) or "total")
        vals.setdefault(key, []).append(float(m.group(3)) * 1e6)
print(" ".join(f"{k}={statistics.median(v):.1f}" for k, v in sorted(vals.items())))
PY
}

for c in h1 h2c h2tls; do : > "$dir/$c.prober"; : > "$dir/$c.h2load"; done
: > "$dir/dns.prober"; : > "$dir/dns.bb"
for r in $(seq "$ROUNDS"); do
  prober_rtt -c "$N" -i 0 http://127.0.0.1:18081/echo >> "$dir/h1.prober"
  h2load_mean -n "$N" -c 1 -m 1 --h1 http://127.0.0.1:18081/echo >> "$dir/h1.h2load"
  prober_rtt -c "$N" -i 0 h2c://127.0.0.1:18082/echo >> "$dir/h2c.prober"
  h2load_mean -n "$N" -c 1 -m 1 http://127.0.0.1:18082/echo >> "$dir/h2c.h2load"
  prober_rtt -c "$N" -i 0 --insecure https://127.0.0.1:18443/echo >> "$dir/h2tls.prober"
  h2load_mean -n "$N" -c 1 -m 1 https://127.0.0.1:18443/echo >> "$dir/h2tls.h2load"
  prober_rtt -c "$BB_N" -i 1ms dns://127.0.0.1:18053/www.test.lan >> "$dir/dns.prober"
  blackbox dns_a 127.0.0.1:18053 | sed 's/.*dns_request=\([0-9.]*\).*/\1/' >> "$dir/dns.bb"
done

echo "## prober against h2load and curl (nginx, 64-byte file, one connection, 1 in flight)"
echo
echo "| protocol | prober p50 (µs) | prober mean (µs) | h2load mean (µs) | prober p50 / h2load mean | prober mean / h2load mean |"
echo "|---|---|---|---|---|---|"
for c in h1 h2c h2tls; do
  p=$(median 1 < "$dir/$c.prober"); pm=$(median 2 < "$dir/$c.prober"); h=$(median < "$dir/$c.h2load")
  python3 -c "print(f'| $c | {$p:.1f} | {$pm:.1f} | {$h:.1f} | {$p/$h:.2f} | {$pm/$h:.2f} |')"
done
urls=$(for i in $(seq 500); do printf -- '-o /dev/null http://127.0.0.1:18081/echo '; done)
# shellcheck disable=SC2086
curl -s -w '%{time_total}\n' $urls | awk '{print $1*1e6}' > "$dir/curl"
echo
echo "curl -w time_total, HTTP/1.1, one connection, 500 URLs: median $(median < "$dir/curl") µs"
echo
echo "## prober --new-connection against blackbox_exporter's http module (medians of $BB_N probes, µs)"
echo
echo "blackbox: $(blackbox http_h1 http://127.0.0.1:18081/echo)"
"$PROBER" run -q -o json -c "$BB_N" -i 5ms --new-connection http://127.0.0.1:18081/echo | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d["type"]=="summary":
        ph = d["phases"]
        parts = [k + "=%.1f" % (ph[k]["p50"] / 1000) for k in ["resolve", "connect", "write", "first_byte", "body"] if k in ph]
        print("prober:  " + " ".join(parts) + " rtt=%.1f" % (d["rtt"]["p50"] / 1000))'
echo
echo "## dns:// against blackbox_exporter's dns module (dnsmasq, A record, UDP)"
echo
p=$(median 1 < "$dir/dns.prober"); b=$(median < "$dir/dns.bb")
python3 -c "print(f'prober p50 {$p:.1f} µs, blackbox probe_dns_duration_seconds{{phase=\"request\"}} median {$b:.1f} µs, ratio {$p/$b:.2f}')"
echo
echo "(medians of $ROUNDS rounds of $N requests (h2load, prober) and $BB_N probes (DNS), alternating; $(nproc) CPUs)"
