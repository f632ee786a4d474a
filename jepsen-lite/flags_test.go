package main

import (
	"slices"
	"strings"
	"testing"
)

// Spare slots exist only for the membership nemesis, on the local
// backend; compose has none, so it refuses membership and leaves it out
// of all.
func TestMembershipFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		spares int
		err    string
	}{
		{[]string{"--nemesis", "all"}, 2, ""},
		{[]string{"--nemesis", "membership", "--spares", "3"}, 3, ""},
		{[]string{"--nemesis", "partition,kill"}, 0, ""},
		{[]string{"--nemesis", "membership", "--spares", "0"}, 0, "--spares of at least 1"},
		{[]string{"--nemesis", "membership", "--nodes", "5", "--spares", "5"}, 0, "at most 9 node slots"},
		{[]string{"--backend", "compose", "--nemesis", "membership"}, 0, "no membership nemesis"},
		{[]string{"--backend", "compose", "--nemesis", "all"}, 0, ""},
	} {
		o, err := parseFlags(append(tc.args, "--seed", "1"))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if o.spares != tc.spares {
			t.Errorf("%v: %d spares, want %d", tc.args, o.spares, tc.spares)
		}
		if o.backend == "compose" && slices.Contains(o.nemeses, "membership") {
			t.Errorf("%v: compose runs membership: %v", tc.args, o.nemeses)
		}
	}
}

// The reshard nemesis is part of all on both backends (it needs no spare
// node) and starts the cluster with room to grow: ReshardStartShards
// unless --shards is given, and --shards with no room is refused.
func TestReshardFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		shards int
		err    string
	}{
		{[]string{"--nemesis", "all"}, 2, ""},
		{[]string{"--backend", "compose", "--nemesis", "all"}, 2, ""},
		{[]string{"--nemesis", "reshard,kill", "--shards", "3"}, 3, ""},
		{[]string{"--nemesis", "reshard", "--nodes", "5", "--shards", "6"}, 6, ""},
		{[]string{"--nemesis", "partition,kill"}, 4, ""},
		{[]string{"--nemesis", "reshard", "--shards", "6"}, 0, "no room to grow"},
	} {
		o, err := parseFlags(append(tc.args, "--seed", "1"))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if o.shards != tc.shards {
			t.Errorf("%v: %d shards, want %d", tc.args, o.shards, tc.shards)
		}
		if slices.Contains(tc.args, "all") && !slices.Contains(o.nemeses, "reshard") {
			t.Errorf("%v: all without reshard: %v", tc.args, o.nemeses)
		}
	}
}

func TestVersionLine(t *testing.T) {
	var b strings.Builder
	printVersion(&b)
	if !strings.HasPrefix(b.String(), "jepsen-lite ") || !strings.Contains(b.String(), "(commit ") {
		t.Fatalf("jepsen-lite --version printed %q", b.String())
	}
}
