package main

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// utime 250 and stime 50 ticks: 3 s. The command name holds a space
	// and a parenthesis, as a process may name itself.
	line := "4242 (raftq node) x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 50 0 0 20 0 12 0 100 2000000 5000 18446744073709551615"
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 {
		t.Errorf("parseStatCPU = %v, want 3", got)
	}
	for _, bad := range []string{
		"",
		"4242 raftq-node S 1",                    // no parentheses
		"4242 (raftq-node) S 1 2 3",              // too few fields
		"4242 (n) S 1 1 1 0 -1 0 0 0 0 0 x 50 0", // utime not a number
	} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) accepted a bad line", bad)
		}
	}
}

// TestProcCPUMatchesRusage reads this process both ways after burning CPU:
// the /proc path the bench uses for --pids must agree with getrusage. The
// loop burns CPU time, not wall time: under a loaded CI machine a 300 ms
// wall-clock loop got 130 ms of CPU. The /proc read is bracketed by two
// getrusage reads, so nothing depends on how quickly they follow each other.
func TestProcCPUMatchesRusage(t *testing.T) {
	start := selfCPU()
	deadline := time.Now().Add(30 * time.Second)
	for selfCPU()-start < 0.3 {
		if time.Now().After(deadline) {
			t.Fatalf("getrusage saw %.3f s of CPU in 30 s of busy loop", selfCPU()-start)
		}
	}
	before := selfCPU()
	proc, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	after := selfCPU()
	// /proc counts in 10 ms ticks, so it may trail by up to one tick.
	const slack = 0.02
	if proc < before-slack || proc > after+slack {
		t.Errorf("/proc says %.3f s, getrusage %.3f s before it and %.3f s after", proc, before, after)
	}
}

func TestCPUUse(t *testing.T) {
	a := cpuMark{nodes: []float64{10, 20, 30}, self: 1}
	b := cpuMark{nodes: []float64{13, 24, 35}, self: 3}
	u := a.use(b, 100_000)
	if u.ServerS != 12 || u.ClientS != 2 {
		t.Errorf("server %v s, client %v s; want 12 and 2", u.ServerS, u.ClientS)
	}
	if math.Abs(u.ServerUsPerMsg-120) > 1e-9 || math.Abs(u.ClientUsPerMsg-20) > 1e-9 {
		t.Errorf("per message: server %v us, client %v us; want 120 and 20", u.ServerUsPerMsg, u.ClientUsPerMsg)
	}
	if !strings.Contains(u.row(), "nodes 12.0 s (120.0 us/msg)") {
		t.Errorf("row %q", u.row())
	}

	// A node unread at either end leaves the server figures out, and says
	// why, instead of reporting a partial sum.
	b.err = errors.New("node CPU from http://n2/metrics: connection refused")
	u = a.use(b, 100_000)
	if u.ServerS != 0 || u.ServerUsPerMsg != 0 || !strings.Contains(u.ServerUnreadErr, "connection refused") {
		t.Errorf("unread node: %+v", u)
	}
	if u.ClientS != 2 {
		t.Errorf("client CPU lost with a node unread: %+v", u)
	}
	if u := (cpuMark{}).use(cpuMark{}, 10); u.ServerUnreadErr == "" {
		t.Errorf("no node sources: %+v", u)
	}
}
