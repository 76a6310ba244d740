// A reference gRPC echo server in grpc-go for prober's Echo service
// (proto/prober/v1/echo.proto), for the cross pairs in benches/peers:
// prober's client against grpc-go's server, and ghz (grpc-go's client)
// against prober's responder, next to ghz against this one.
//
// No generated code: the messages are read and written with protowire
// through a pass-through codec, so the build needs no protoc. It answers
// as `prober serve --grpc` does: the request's seq, its payload (or
// reply_size zero bytes when that is set), and the receive and send times.
//
//	go build -o grpc-go-echo . && ./grpc-go-echo -listen 127.0.0.1:50061
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protowire"
)

// raw passes message bytes through unchanged, under the name "proto" so
// clients' content-type matches.
type raw struct{}

func (raw) Name() string { return "proto" }

func (raw) Marshal(v any) ([]byte, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T is not []byte", v)
	}
	return b, nil
}

func (raw) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T is not *[]byte", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

// reply builds a PingReply for the PingRequest in `in`.
func reply(in []byte, recv uint64) ([]byte, error) {
	var seq uint64
	var payload []byte
	var size uint64
	for len(in) > 0 {
		num, typ, n := protowire.ConsumeTag(in)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		in = in[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			seq, n = protowire.ConsumeVarint(in)
		case num == 2 && typ == protowire.BytesType:
			payload, n = protowire.ConsumeBytes(in)
		case num == 4 && typ == protowire.VarintType:
			size, n = protowire.ConsumeVarint(in)
		default:
			n = protowire.ConsumeFieldValue(num, typ, in)
		}
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		in = in[n:]
	}
	if size > 0 {
		payload = make([]byte, size)
	}
	out := make([]byte, 0, len(payload)+40)
	out = protowire.AppendTag(out, 1, protowire.VarintType)
	out = protowire.AppendVarint(out, seq)
	out = protowire.AppendTag(out, 2, protowire.BytesType)
	out = protowire.AppendBytes(out, payload)
	out = protowire.AppendTag(out, 3, protowire.VarintType)
	out = protowire.AppendVarint(out, recv)
	out = protowire.AppendTag(out, 4, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(time.Now().UnixNano()))
	return out, nil
}

func ping(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	var in []byte
	if err := dec(&in); err != nil {
		return nil, err
	}
	return reply(in, uint64(time.Now().UnixNano()))
}

func stream(_ any, s grpc.ServerStream) error {
	for {
		var in []byte
		if err := s.RecvMsg(&in); err != nil {
			return nil // the client closed its side, or the stream broke
		}
		out, err := reply(in, uint64(time.Now().UnixNano()))
		if err != nil {
			return err
		}
		if err := s.SendMsg(out); err != nil {
			return err
		}
	}
}

var desc = grpc.ServiceDesc{
	ServiceName: "prober.v1.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Ping", Handler: ping}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Stream", Handler: stream, ServerStreams: true, ClientStreams: true,
	}},
}

func main() {
	listen := flag.String("listen", "127.0.0.1:50061", "address to serve on (loopback only in the benches)")
	flag.Parse()
	encoding.RegisterCodec(raw{})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "grpc-go echo on %s\n", l.Addr())
	s := grpc.NewServer()
	s.RegisterService(&desc, struct{}{})
	log.Fatal(s.Serve(l))
}
