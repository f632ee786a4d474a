package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseConfigDefaultsAndAdvertise(t *testing.T) {
	c, err := parseConfig([]string{"--node-id", "n1"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "data/n1" || c.GRPCAdvertise != c.GRPCBind || c.RaftAdvertise != c.RaftBind || c.GossipAdvertise != c.GossipBind {
		t.Fatalf("defaults not derived: %+v", c)
	}
	if c.Shards != 0 || c.Replication != 3 || c.BootstrapExpect != 3 || c.LogStore != "wal" {
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
		{[]string{"--node-id", "n", "--log-level", "loud"}, nil, "--log-level"},
		{[]string{"--node-id", "n", "--log-store", "rocks"}, nil, `--log-store must be wal or bolt, got "rocks"`},
		{[]string{"--node-id", "n", "extra"}, nil, "unexpected argument"},
		{[]string{"--node-id", "n", "--snapshot-interval", "-1s"}, nil, "--snapshot-interval"},
		{[]string{"--node-id", "n"}, map[string]string{"RAFTQ_SHARDS": "many"}, "RAFTQ_SHARDS"},
		{[]string{"--no-such-flag"}, nil, "not defined"},
	}
	for _, tc := range cases {
		_, err := parseConfig(tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q, %v) = %v, want error containing %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestParseConfigHelpListsEveryFlag(t *testing.T) {
	var out strings.Builder
	_, err := parseConfig([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"node-id", "data-dir", "grpc-bind", "grpc-advertise", "raft-bind", "raft-advertise", "gossip-bind", "gossip-advertise", "http-bind", "join", "cluster-name", "bootstrap-expect", "shards", "replication", "clock-offset", "shutdown-timeout", "log-level", "log-store", "repair", "snapshot-threshold", "snapshot-interval", "RAFTQ_"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}
