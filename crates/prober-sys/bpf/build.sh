#!/usr/bin/env bash
# Builds the handshake stamper, synstamp.bpf.c, into the object committed
# beside it, synstamp.bpf.o, which crates/prober-sys/src/synbpf.rs embeds.
# The object is committed so that building prober needs no clang; CI runs
# `build.sh --check`, which rebuilds it and fails if the bytes differ.
#
# Debian 12's clang 14 (apt-get install clang llvm). Debug sections are
# stripped and source paths made relative, so the bytes do not depend on
# where the tree is checked out; BTF (the maps' definitions) is kept.
set -euo pipefail
cd "$(dirname "$0")"
out=$(mktemp)
trap 'rm -f "$out" "$out.o"' EXIT
clang -O2 -g -target bpf -fdebug-prefix-map="$PWD=." -c synstamp.bpf.c -o "$out.o"
llvm-strip -g "$out.o" -o "$out"
if [ "${1:-}" = --check ]; then
  if ! cmp -s "$out" synstamp.bpf.o; then
    echo "bpf: synstamp.bpf.o is not what synstamp.bpf.c builds to: run crates/prober-sys/bpf/build.sh and commit it" >&2
    exit 1
  fi
  echo "bpf: synstamp.bpf.o matches its source"
else
  cp "$out" synstamp.bpf.o
fi
