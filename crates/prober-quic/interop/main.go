// interop: a quic-go HTTP/3 server and client, for prober's interop tests
// (code nobody at prober wrote: quic-go's http3 package).
//
//	interop server ADDR CERT KEY   serves GET /echo (64 bytes of "x") over
//	                               HTTP/3 on UDP ADDR; prints "listening ADDR"
//	interop client URL CA          GETs URL over HTTP/3, trusting CA; prints
//	                               "status N bytes M"
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: interop server ADDR CERT KEY | interop client URL CA")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "server":
		serve(os.Args[2], os.Args[3], os.Args[4])
	case "client":
		get(os.Args[2], os.Args[3])
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

func serve(addr, certFile, keyFile string) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 64))
	})
	srv := &http3.Server{
		Handler:   mux,
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
	}
	fmt.Printf("listening %s\n", conn.LocalAddr())
	if err := srv.Serve(conn); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(url, caFile string) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("status %d bytes %d proto %s\n", resp.StatusCode, len(body), resp.Proto)
}
