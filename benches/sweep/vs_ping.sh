#!/usr/bin/env bash
# The ICMP sweep against iputils ping at the same intervals, alternating
# ping and prober per interval, 40 probes each: p50 of ping's RTT, of
# prober's ping_rtt (ping's convention: user send to the kernel's receive
# stamp) and of prober's rtt (user send to user receive).
#   benches/sweep/vs_ping.sh [INTERVALS...]   (default 1ms 10ms 100ms 1s; root)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/release/prober
[ -x "$bin" ] || cargo build --release --locked -p prober-cli
ivs=("$@"); [ ${#ivs[@]} -gt 0 ] || ivs=(1ms 10ms 100ms 1s)
secs() { case $1 in *us) echo "0.00000${1%us}";; *ms) awk "BEGIN{print ${1%ms}/1000}";; *s) echo "${1%s}";; esac; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
printf '%-8s %12s %16s %12s\n' interval "ping p50" "prober ping_rtt" "prober rtt"
for iv in "${ivs[@]}"; do
  p=$(ping -n -c 40 -i "$(secs "$iv")" 127.0.0.1 \
      | sed -n 's/.*time=\([0-9.]*\) ms/\1/p' | awk '{print $1*1000}' | median)
  json=$("$bin" sweep --intervals "$iv" -c 40 --warmup 2 -o json icmp://127.0.0.1 2>/dev/null)
  pr=$(grep '"type":"probe"' <<<"$json" | sed -n 's/.*"ping_rtt_ns":\([0-9]*\).*/\1/p' | awk '{print $1/1000}' | median)
  r=$(grep '"type":"probe"' <<<"$json" | sed -n 's/.*"rtt_ns":\([0-9]*\).*/\1/p' | awk '{print $1/1000}' | median)
  printf '%-8s %9.1f µs %13.1f µs %9.1f µs\n' "$iv" "$p" "$pr" "$r"
done
