package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testcluster"
)

// The HTTP port serves the console unless --console=false, and the console
// answers only under a host it was told of (IP addresses and localhost
// always): a page of another site rebound to this address gets 421.
func TestServeHTTPConsoleSwitchAndHosts(t *testing.T) {
	get := func(url, host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		cl := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, on := range []bool{true, false} {
		addr := "127.0.0.1:" + testcluster.FreePorts(t, 1)[0]
		cfg := &config{HTTPBind: addr, NodeID: "n1", Console: on, ConsoleHosts: "raftq.internal", GRPCAdvertise: "127.0.0.1:1", ShutdownTimeout: 5 * time.Second}
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "raftq_up 1\n") })
		stop := serveHTTP(context.Background(), cfg, &security{}, mux, mux, slog.New(slog.DiscardHandler))
		base := "http://" + addr
		deadline := time.Now().Add(5 * time.Second)
		for {
			if code, _ := get(base+"/metrics", ""); code == http.StatusOK || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if code, body := get(base+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "raftq_up") {
			t.Fatalf("console %v: /metrics %d %q", on, code, body)
		}
		code, _ := get(base+"/console/login", "")
		if on && code != http.StatusOK || !on && code != http.StatusNotFound {
			t.Errorf("console %v: /console/login by IP: %d", on, code)
		}
		if on {
			if code, _ := get(base+"/console/login", "raftq.internal"); code != http.StatusOK {
				t.Errorf("/console/login under a --console-hosts name: %d", code)
			}
			if code, body := get(base+"/console/login", "rebind.evil"); code != http.StatusMisdirectedRequest || !strings.Contains(body, "--console-hosts") {
				t.Errorf("/console/login under another name: %d %q", code, body)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		cancel()
	}
}
