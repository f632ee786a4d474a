package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// pprofServer serves Go's profiles (--pprof-bind). They are kept off the
// HTTP port, which serves /metrics and /healthz to whatever scrapes them
// and is bound to every interface in the container image: a heap profile
// shows what the process holds, message bodies included, and a CPU
// profile or trace costs the node while it runs.
func pprofServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// checkLoopback refuses an address other hosts could reach: profiles are
// for someone on the node's own host (or tunnelled to it), never the
// network.
func checkLoopback(flagName, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", flagName, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--%s %q: profiles are served on a loopback address only (127.0.0.1:PORT or [::1]:PORT); they show what the process holds, message bodies included", flagName, addr)
	}
	return nil
}
