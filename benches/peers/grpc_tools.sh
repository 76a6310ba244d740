# Sourced by the gRPC peer scripts (from the repo root): BIN holds ghz and
# the grpc-go echo server, built from the Go module proxy on first use, and
# PROBER a release prober, built if missing.
PROBER=${PROBER:-target/release/prober}
BIN=benches/peers/.bin
mkdir -p "$BIN"
[ -x "$PROBER" ] || cargo build --release -p prober-cli
[ -x "$BIN/grpc-go-echo" ] ||
  (cd benches/peers/grpc-go-echo && go build -o ../.bin/grpc-go-echo .)
[ -x "$BIN/ghz" ] || GOBIN=$PWD/$BIN go install github.com/bojand/ghz/cmd/ghz@v0.93.0
