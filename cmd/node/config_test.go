package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/tlsconf"
)

// env is an environment with kv set; RAFTQ_INSECURE is true unless kv
// sets it, so tests of other flags need no certificates.
func env(kv map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := kv[k]; ok {
			return v
		}
		if k == "RAFTQ_INSECURE" {
			return "true"
		}
		return ""
	}
}

func TestParseConfigSecurity(t *testing.T) {
	secure := map[string]string{"RAFTQ_INSECURE": ""}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-id", "n"}, "TLS is required"},
		{[]string{"--node-id", "n", "--tls-ca", "ca.crt", "--tls-cert", "n.crt", "--tls-key", "n.key"}, "TLS is required"},
		{[]string{"--node-id", "n", "--insecure", "--tls-ca", "ca.crt"}, "contradict"},
		{[]string{"--node-id", "n", "--insecure", "--client-auth", "require"}, "cannot go with --insecure"},
		{[]string{"--node-id", "n", "--insecure", "--client-auth", "always"}, "--client-auth must be"},
	} {
		_, err := parseConfig(tc.args, env(secure), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want error containing %q", tc.args, err, tc.want)
		}
	}
	c, err := parseConfig([]string{"--node-id", "n", "--tls-ca", "ca.crt", "--tls-cert", "n.crt", "--tls-key", "n.key", "--gossip-key-file", "g"}, env(secure), io.Discard)
	if err != nil || c.Insecure {
		t.Fatalf("every TLS file named: %v, insecure %v", err, c != nil && c.Insecure)
	}
}

func TestLoadSecurityBindsTheNodeID(t *testing.T) {
	dir := t.TempDir()
	d, err := tlsconf.InitDir(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f, err := d.IssueNode("n1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := &config{NodeID: "n2", TLSCA: f.CA, TLSCert: f.Cert, TLSKey: f.Key, GossipKeyFile: d.GossipKeyFile()}
	if _, err := c.loadSecurity(); err == nil || !strings.Contains(err.Error(), "node/n1, not of node n2") {
		t.Fatalf("n1's certificate as n2: %v", err)
	}
	c.NodeID = "n1"
	sec, err := c.loadSecurity()
	if err != nil || sec.tls == nil || len(sec.gossipKeys) != 1 || len(sec.gossipKeys[0]) != 32 {
		t.Fatalf("n1's own files: %v", err)
	}
	bad := filepath.Join(dir, "bad.key")
	for content, want := range map[string]string{"": "holds no key", "not base64!\n": "not base64", "c2hvcnQ=\n": "16, 24 or 32 bytes"} {
		if err := os.WriteFile(bad, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readGossipKeys(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("gossip key file %q: %v, want %q", content, err, want)
		}
	}
}

func TestParseConfigDefaultsAndAdvertise(t *testing.T) {
	c, err := parseConfig([]string{"--node-id", "n1"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "data/n1" || c.GRPCAdvertise != c.GRPCBind || c.RaftAdvertise != c.RaftBind || c.GossipAdvertise != c.GossipBind {
		t.Fatalf("defaults not derived: %+v", c)
	}
	if c.Shards != 0 || c.Replication != 3 || c.BootstrapExpect != 3 || c.LogStore != "wal" || c.MaxClockOffset != 500*time.Millisecond {
		t.Fatalf("cluster defaults: %+v", c)
	}
}

func TestParseConfigEnvironmentAndFlagPrecedence(t *testing.T) {
	e := env(map[string]string{"RAFTQ_NODE_ID": "from-env", "RAFTQ_SHARDS": "16", "RAFTQ_JOIN": "a:1, b:2", "RAFTQ_CLOCK_OFFSET": "250ms"})
	c, err := parseConfig([]string{"--shards", "4"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeID != "from-env" || c.Shards != 4 || c.ClockOffset != 250*time.Millisecond {
		t.Fatalf("env or flag precedence wrong: %+v", c)
	}
	if got := c.joinList(); len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Fatalf("join list %q", got)
	}
}

func TestParseConfigRejects(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--node-id", "n", "--shards", "1000"}, nil, "--shards"},
		{[]string{"--node-id", "n", "--replication", "0"}, nil, "--replication"},
		{[]string{"--node-id", "n", "--bootstrap-expect", "2"}, nil, "below --replication"},
		{[]string{"--node-id", "n", "--cluster-name", strings.Repeat("x", 256)}, nil, "--cluster-name is 256 bytes"},
		{[]string{"--node-id", "n", "--grpc-bind", "0.0.0.0:7101"}, nil, "grpc-advertise"},
		{[]string{"--node-id", "n", "--grpc-bind", "127.0.0.1:65500"}, nil, "--peer-bind from --grpc-bind"},
		{[]string{"--node-id", "n", "--peer-bind", "7501"}, nil, "--peer-bind"},
		{[]string{"--node-id", "n", "--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--node-id", "n", "--log-format", "xml"}, nil, `--log-format "xml": want text or json`},
		{[]string{"--node-id", "n", "--metrics-max-queues", "0"}, nil, "--metrics-max-queues must be at least 1, got 0"},
		{[]string{"--node-id", "n", "--log-store", "rocks"}, nil, `--log-store must be wal or bolt, got "rocks"`},
		{[]string{"--node-id", "n", "extra"}, nil, "unexpected argument"},
		{[]string{"--node-id", "n", "--max-clock-offset", "0s"}, nil, "--max-clock-offset must be within 1ms..1m0s"},
		{[]string{"--node-id", "n", "--max-clock-offset", "2m"}, nil, "--max-clock-offset"},
		{[]string{"--node-id", "n", "--dead-node-grace", "4s"}, nil, "--dead-node-grace must be 0 (never replace) or at least 5s"},
		{[]string{"--node-id", "n", "--dead-node-grace", "-1m"}, nil, "--dead-node-grace must be 0"},
		{[]string{"--node-id", "n", "--rebalance-stable", "10ms"}, nil, "--rebalance-stable must be within 100ms..1h"},
		{[]string{"--node-id", "n", "--rebalance-stable", "2h"}, nil, "--rebalance-stable must be within"},
		{[]string{"--node-id", "n", "--disk-reserve", "lots"}, nil, `--disk-reserve: size "lots"`},
		{[]string{"--node-id", "n", "--max-parked-receives", "-1"}, nil, "--max-parked-receives must not be negative"},
		{[]string{"--node-id", "n", "--max-client-conns", "-1"}, nil, "--max-client-conns must not be negative (0: no cap), got -1"},
		{[]string{"--node-id", "n", "--max-streams-per-conn", "15"}, nil, "--max-streams-per-conn must be 0 (no cap) or within 16..1048576, got 15"},
		{[]string{"--node-id", "n", "--max-streams-per-conn", "1048577"}, nil, "--max-streams-per-conn must be 0 (no cap) or within 16..1048576"},
		{[]string{"--node-id", "n", "--max-raft-conns", "63"}, nil, "--max-raft-conns must be 0 (no cap) or at least 64, got 63"},
		{[]string{"--node-id", "n", "--raft-idle-timeout", "119s"}, nil, "--raft-idle-timeout must be 0 (never) or at least 2m0s"},
		{[]string{"--node-id", "n", "--memory-budget", "12MiB"}, nil, "at least 64MiB"},
		{[]string{"--node-id", "n", "--memory-budget", "lots"}, nil, `--memory-budget: size "lots"`},
		{[]string{"--node-id", "n", "--disk-reserve", "512MiB,120%"}, nil, "within [0, 100)"},
		{[]string{"--node-id", "n", "--disk-reserve", "5 parsecs"}, nil, `unknown unit "parsecs"`},
		{[]string{"--node-id", "n", "--wal-segment-size", "100KiB"}, nil, "--wal-segment-size"},
		{[]string{"--node-id", "n", "--disk-stall-timeout", "-1s"}, nil, "--disk-stall-timeout"},
		{[]string{"--node-id", "n", "--snapshot-interval", "-1s"}, nil, "--snapshot-interval"},
		{[]string{"--node-id", "n"}, map[string]string{"RAFTQ_SHARDS": "many"}, "RAFTQ_SHARDS"},
		{[]string{"--node-id", "n", "--pprof-bind", "0.0.0.0:7601"}, nil, "--pprof-bind \"0.0.0.0:7601\": profiles are served on a loopback address only"},
		{[]string{"--node-id", "n", "--pprof-bind", ":7601"}, nil, "loopback address only"},
		{[]string{"--node-id", "n", "--pprof-bind", "10.0.0.5:7601"}, nil, "loopback address only"},
		{[]string{"--node-id", "n"}, map[string]string{"RAFTQ_PPROF_BIND": "node1.example:7601"}, "loopback address only"},
		{[]string{"--node-id", "n", "--pprof-bind", "7601"}, nil, "--pprof-bind \"7601\""},
		{[]string{"--no-such-flag"}, nil, "not defined"},
	}
	for _, tc := range cases {
		_, err := parseConfig(tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q, %v) = %v, want error containing %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// Each limit at its edge is taken, and its defaults and "none" reach
// raftmux as raftmux reads them.
func TestParseConfigLimits(t *testing.T) {
	c, err := parseConfig([]string{"--node-id", "n"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxClientConns != 10000 || c.MaxStreamsPerConn != 1000 || c.MaxRaftConns != 4096 || c.RaftIdleTimeout != 5*time.Minute {
		t.Fatalf("defaults: %d client conns, %d streams, %d raft conns, raft idle %v", c.MaxClientConns, c.MaxStreamsPerConn, c.MaxRaftConns, c.RaftIdleTimeout)
	}
	if n, idle := c.raftLimits(); n != 4096 || idle != 5*time.Minute {
		t.Fatalf("raft limits %d, %v; want the flags'", n, idle)
	}
	c, err = parseConfig([]string{"--node-id", "n", "--max-client-conns", "1", "--max-streams-per-conn", "16", "--max-raft-conns", "64", "--raft-idle-timeout", "2m"}, env(nil), io.Discard)
	if err != nil {
		t.Fatalf("every limit at its floor: %v", err)
	}
	if n, idle := c.raftLimits(); n != 64 || idle != 2*time.Minute {
		t.Fatalf("raft limits at their floors: %d, %v", n, idle)
	}
	if _, err := parseConfig([]string{"--node-id", "n", "--max-streams-per-conn", "1048576"}, env(nil), io.Discard); err != nil {
		t.Fatalf("--max-streams-per-conn at its top: %v", err)
	}
	c, err = parseConfig([]string{"--node-id", "n", "--max-client-conns", "0", "--max-streams-per-conn", "0", "--max-raft-conns", "0", "--raft-idle-timeout", "0"}, env(nil), io.Discard)
	if err != nil {
		t.Fatalf("every limit off: %v", err)
	}
	if n, idle := c.raftLimits(); n >= 0 || idle >= 0 {
		t.Fatalf("raft limits off = %d, %v; want negative (raftmux reads 0 as its default)", n, idle)
	}
}

func TestParseConfigPprofOnLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7601", "[::1]:7601", "localhost:7601", "127.0.0.2:0"} {
		c, err := parseConfig([]string{"--node-id", "n", "--pprof-bind", addr}, env(nil), io.Discard)
		if err != nil || c.PprofBind != addr {
			t.Errorf("--pprof-bind %s: %v (bind %q)", addr, err, c.PprofBind)
		}
	}
	if c, err := parseConfig([]string{"--node-id", "n"}, env(nil), io.Discard); err != nil || c.PprofBind != "" {
		t.Fatalf("default --pprof-bind = %q, %v; want none", c.PprofBind, err)
	}
}

func TestParseConfigHelpListsEveryFlag(t *testing.T) {
	var out strings.Builder
	_, err := parseConfig([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"node-id", "data-dir", "grpc-bind", "grpc-advertise", "peer-bind", "peer-advertise", "raft-bind", "raft-advertise", "gossip-bind", "gossip-advertise", "http-bind", "pprof-bind", "join", "cluster-name", "bootstrap-expect", "shards", "replication", "clock-offset", "max-clock-offset", "shutdown-timeout", "log-level", "log-store", "wal-segment-size", "disk-stall-timeout", "disk-reserve", "repair", "dead-node-grace", "snapshot-threshold", "snapshot-interval", "rebalance", "rebalance-stable", "max-client-conns", "max-streams-per-conn", "max-raft-conns", "raft-idle-timeout", "RAFTQ_"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

func TestParseConfigDiskSettings(t *testing.T) {
	c, err := parseConfig([]string{"--node-id", "n1"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stall, reserve, seg := c.diskSettings()
	if stall != time.Second || reserve.Bytes != 512<<20 || reserve.Percent != 5 || seg != 64<<20 {
		t.Fatalf("defaults: stall %v reserve %+v segment %d", stall, reserve, seg)
	}
	c, err = parseConfig([]string{"--node-id", "n1", "--disk-stall-timeout", "0", "--disk-reserve", "1GB, 2%,8MiB", "--wal-segment-size", "4MiB"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stall, reserve, seg = c.diskSettings()
	if stall >= 0 || reserve.Bytes != 1e9 || reserve.Percent != 2 || seg != 4<<20 {
		t.Fatalf("set: stall %v (want disabled) reserve %+v segment %d", stall, reserve, seg)
	}
	if r, err := parseReserve("0"); err != nil || r.Bytes != 0 || r.Percent != 0 {
		t.Fatalf(`parseReserve("0") = %+v, %v; want no reserve`, r, err)
	}
	for in, want := range map[string]uint64{"512": 512, "1.5KiB": 1536, "2 GiB": 2 << 30, "3MB": 3e6} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestParseConfigPeerAddresses(t *testing.T) {
	cases := []struct {
		args      []string
		bind, adv string
	}{
		{[]string{"--node-id", "n"}, "127.0.0.1:7501", "127.0.0.1:7501"},
		{[]string{"--node-id", "n", "--grpc-bind", "127.0.0.2:9000"}, "127.0.0.2:9400", "127.0.0.2:9400"},
		{[]string{"--node-id", "n", "--grpc-bind", "0.0.0.0:7101", "--grpc-advertise", "10.0.0.5:7101"}, "0.0.0.0:7501", "10.0.0.5:7501"},
		{[]string{"--node-id", "n", "--peer-bind", "10.0.0.6:8000"}, "10.0.0.6:8000", "10.0.0.6:8000"},
		{[]string{"--node-id", "n", "--peer-bind", "0.0.0.0:8000", "--peer-advertise", "n1:8000"}, "0.0.0.0:8000", "n1:8000"},
	}
	for _, tc := range cases {
		c, err := parseConfig(tc.args, env(nil), io.Discard)
		if err != nil {
			t.Errorf("parseConfig(%q): %v", tc.args, err)
			continue
		}
		if c.PeerBind != tc.bind || c.PeerAdvertise != tc.adv {
			t.Errorf("parseConfig(%q): peer bind %s advertise %s; want %s, %s", tc.args, c.PeerBind, c.PeerAdvertise, tc.bind, tc.adv)
		}
	}
}

func TestWarnExpiry(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		left time.Duration
		warn bool
	}{{90 * 24 * time.Hour, false}, {29 * 24 * time.Hour, true}, {-time.Hour, true}} {
		var out strings.Builder
		warnExpiry(slog.New(slog.NewTextHandler(&out, nil)), now.Add(tc.left), now)
		if got := strings.Contains(out.String(), "expires soon"); got != tc.warn {
			t.Errorf("%v left: warned %v, want %v (%q)", tc.left, got, tc.warn, out.String())
		}
	}
}
