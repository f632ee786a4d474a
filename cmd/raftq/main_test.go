package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
)

type result struct {
	code           int
	stdout, stderr string
}

// raftq runs the CLI in-process against addr.
func raftq(t *testing.T, addr, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := func(k string) string {
		if k == "RAFTQ_ADDR" {
			return addr
		}
		return ""
	}
	code := run(context.Background(), args, env, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

func mustRun(t *testing.T, addr string, args ...string) string {
	t.Helper()
	r := raftq(t, addr, "", args...)
	if r.code != exitOK {
		t.Fatalf("raftq %v: exit %d, stderr %q", args, r.code, r.stderr)
	}
	return r.stdout
}

func TestUsageErrors(t *testing.T) {
	// Nothing listens here: usage errors must be caught before dialling.
	const nowhere = "127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: raftq"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"queue", "explode", "x"}, `unknown command "queue explode"`},
		{[]string{"queue", "create"}, "want 1 argument(s) NAME, got 0"},
		{[]string{"queue", "create", "a", "b"}, "want 1 argument(s) NAME, got 2"},
		{[]string{"queue", "create", "q", "--visibility", "soon"}, "invalid value"},
		{[]string{"queue", "create", "q", "--visibility", "-1s"}, "--visibility -1s is negative"},
		{[]string{"queue", "create", "q", "--max-receives", "99999999999"}, "--max-receives 99999999999 is above the limit 1000"},
		// A zero that would silently mean a default is refused, with what
		// leaving the flag out does.
		{[]string{"queue", "create", "q", "--visibility", "0s"}, "--visibility 0s: give a positive duration (leave the flag out for the default 30s)"},
		{[]string{"queue", "update", "q", "--max-receives", "0"}, "--max-receives 0: give at least 1 (leave the flag out for the queue's current value)"},
		{[]string{"receive", "q", "--visibility", "0s"}, "--visibility 0s: give a positive duration (leave the flag out for the queue's visibility)"},
		{[]string{"send", "q", "b", "--delay", "0s"}, "--delay 0s: give a positive duration (leave the flag out for the queue's delay)"},
		{[]string{"send", "q", "b", "--unique-until-done"}, "--unique-for and --unique-until-done need --dedup KEY"},
		{[]string{"send", "q", "b", "--dedup", "k", "--unique-for", "400h"}, "--unique-for 400h0m0s is above the limit 336h0m0s"},
		// Bounds in flag names and durations, not proto fields in ms.
		{[]string{"queue", "create", "q", "--visibility", "13h"}, "--visibility 13h0m0s is above the limit 12h0m0s"},
		{[]string{"queue", "create", "q", "--dedup-window", "400h"}, "--dedup-window 400h0m0s is above the limit 336h0m0s"},
		{[]string{"receive", "q", "--visibility", "100000h"}, "--visibility 100000h0m0s is above the limit 12h0m0s"},
		{[]string{"extend", "r", "13h"}, "DURATION 13h0m0s is above the limit 12h0m0s"},
		{[]string{"cluster", "status", "--wait", "-1s"}, "--wait -1s is negative"},
		{[]string{"cluster", "status", "extra"}, "usage: raftq cluster status [flags] (see raftq cluster status --help)"},
		{[]string{"cluster", "rebalance", "now"}, "want 0 argument(s)"},
		{[]string{"cluster", "rebalance", "--dry-run=maybe"}, "invalid boolean value"},
		{[]string{"completion", "fish"}, `SHELL "fish": want bash or zsh`},
		{[]string{"queue"}, `"queue" needs a subcommand`},
		{[]string{"receive", "q", "--nosuch"}, "flag provided but not defined: -nosuch"},
		{[]string{"send", "q"}, "want 2 argument(s) QUEUE BODY, got 1"},
		{[]string{"send", "q", "b", "--priority", "10"}, "--priority 10 outside 0-9"},
		{[]string{"send", "q", "b", "--run-at", "tomorrow"}, `--run-at "tomorrow" is not an RFC 3339 time`},
		{[]string{"send", "q", "b", "--run-at", "2030-01-01T00:00:00Z", "--delay", "1s"}, "not both"},
		{[]string{"send", "q", "b", "--attr", "novalue"}, "want key=value"},
		{[]string{"receive", "q", "--max", "0"}, "--max 0 outside 1-1000"},
		{[]string{"receive", "q", "--wait", "30s"}, "--wait 30s outside 0-20s"},
		{[]string{"ack"}, "want at least one RECEIPT"},
		{[]string{"nack", "r", "--delay", "-1s"}, "--delay -1s is negative"},
		{[]string{"extend", "r", "0s"}, `DURATION "0s" is not a positive duration`},
		{[]string{"extend", "r"}, "want 2 argument(s) RECEIPT DURATION, got 1"},
		{[]string{"message", "get"}, "want 1 argument(s) ID, got 0"},
		{[]string{"dlq", "redrive", "q", "--rate", "600"}, "--rate 600 outside 1-500"},
		{[]string{"dlq", "list", "q", "--limit", "-1"}, "--limit -1 is negative"},
		{[]string{"--timeout", "0s", "queue", "list"}, "--timeout 0s is not positive"},
		{[]string{"--addr", " , ", "queue", "list"}, "--addr is empty"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := raftq(t, nowhere, "", c.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, exitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Fatalf("stderr %q does not mention %q", r.stderr, c.want)
			}
			if r.stdout != "" {
				t.Fatalf("usage error wrote to stdout: %q", r.stdout)
			}
		})
	}
}

func TestHelpListsEverything(t *testing.T) {
	r := raftq(t, "", "", "--help")
	if r.code != exitOK {
		t.Fatalf("--help exit %d", r.code)
	}
	for _, c := range commands() {
		if !strings.Contains(r.stdout, c.path+" "+c.args) {
			t.Errorf("--help lacks %q", c.path)
		}
		sub := raftq(t, "", "", append(strings.Fields(c.path), "--help")...)
		if sub.code != exitOK || !strings.Contains(sub.stdout, "usage: raftq "+c.path) || !strings.Contains(sub.stdout, "-timeout") {
			t.Errorf("raftq %s --help: exit %d, stdout %q", c.path, sub.code, sub.stdout)
		}
	}
	for _, f := range []string{"-fifo", "-max-receives", "-backoff-base", "-dedup-window", "-max-size"} {
		if h := raftq(t, "", "", "queue", "update", "--help"); !strings.Contains(h.stdout, f) {
			t.Errorf("queue update --help lacks %s", f)
		}
	}
}

// No node answering is one line that says where the CLI looked and how to
// point it elsewhere.
func TestUnavailableExitCode(t *testing.T) {
	s := clienttest.NewServer(t)
	s.Stop()
	r := raftq(t, s.Addr, "", "--timeout", "2s", "queue", "list")
	want := "raftq: cannot reach the cluster at " + s.Addr + " (connection refused): is it running (make run starts one)? --addr or RAFTQ_ADDR point the CLI at other nodes\n"
	if r.code != exitUnavailable || r.stderr != want {
		t.Fatalf("exit %d, stderr %q; want exit 3, %q", r.code, r.stderr, want)
	}
}

// Without --addr or RAFTQ_ADDR the CLI knows all three nodes of make run,
// so it finds the cluster with any one of them down.
func TestDefaultAddrIsEveryMakeRunNode(t *testing.T) {
	g := newGlobals(defaultAddr)
	if got := g.seeds(); !reflect.DeepEqual(got, []string{"127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"}) {
		t.Fatalf("default seeds %v", got)
	}
}

func TestServerErrorsAreOneLine(t *testing.T) {
	s := clienttest.NewServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "get", "x"}, "raftq: queue \"x\" not found\n"},
		{[]string{"send", "x", "body"}, "raftq: queue \"x\" not found\n"},
		{[]string{"message", "get", "0-99"}, "raftq: message 0-99 not found\n"},
		{[]string{"nack", "bogus"}, "raftq: malformed receipt handle: \"bogus\"\n"},
	} {
		r := raftq(t, s.Addr, "", c.args...)
		if r.code != exitServer || r.stderr != c.want {
			t.Errorf("raftq %v: exit %d, stderr %q; want exit 1, %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// hasRow reports whether a FIELD/VALUE table has the row, whatever the
// column width.
func hasRow(table, field, value string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == field && f[1] == value {
			return true
		}
	}
	return false
}

func TestFullQueue(t *testing.T) {
	s := clienttest.NewServer(t)
	out := mustRun(t, s.Addr, "queue", "create", "capped", "--max-messages-per-shard", "1", "--max-bytes-per-shard", "300000")
	if !hasRow(out, "max-messages-per-shard", "1") || !hasRow(out, "max-bytes-per-shard", "300000") {
		t.Fatalf("queue create output:\n%s", out)
	}
	mustRun(t, s.Addr, "send", "capped", "one")
	r := raftq(t, s.Addr, "", "send", "capped", "two")
	want := "raftq: queue \"capped\" is full on this shard: 1 live messages, max_messages_per_shard 1\n"
	if r.code != exitServer || r.stderr != want {
		t.Fatalf("send to a full queue: exit %d, stderr %q; want exit 1, %q", r.code, r.stderr, want)
	}
	// update lifts the limit; the other flags keep their values.
	out = mustRun(t, s.Addr, "queue", "update", "capped", "--max-messages-per-shard", "0", "--json")
	var q map[string]any
	if err := json.Unmarshal([]byte(out), &q); err != nil || q["max_messages_per_shard"] != float64(0) || q["max_bytes_per_shard"] != float64(300000) {
		t.Fatalf("queue update --json = %v, %v", q, err)
	}
	mustRun(t, s.Addr, "send", "capped", "two")
}

func TestWorkflow(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	out := mustRun(t, a, "queue", "create", "jobs", "--max-receives", "2", "--visibility", "45s")
	if !hasRow(out, "max-receives", "2") || !hasRow(out, "visibility", "45s") {
		t.Fatalf("queue create output:\n%s", out)
	}
	// update changes only the flags given.
	out = mustRun(t, a, "queue", "update", "jobs", "--backoff-base", "2s", "--json")
	var q map[string]any
	if err := json.Unmarshal([]byte(out), &q); err != nil || q["max_receives"] != float64(2) || q["backoff_base_ms"] != float64(2000) || q["visibility_ms"] != float64(45000) {
		t.Fatalf("queue update --json = %v, %v", q, err)
	}
	id := strings.TrimSpace(mustRun(t, a, "send", "jobs", "hello world", "--type", "email", "--attr", "k=v", "--priority", "3"))
	if id == "" || strings.Contains(id, " ") {
		t.Fatalf("send printed %q", id)
	}
	if got := mustRun(t, a, "send", "jobs", "x", "--dedup", "k"); mustRun(t, a, "send", "jobs", "y", "--dedup", "k") != strings.TrimSpace(got)+" (deduplicated: an earlier message had this key)\n" {
		t.Fatal("second send with the same dedup key not reported as deduplicated")
	}
	if r := raftq(t, a, "from\tstdin", "send", "jobs", "-"); r.code != 0 {
		t.Fatalf("send - : %v", r)
	}
	out = mustRun(t, a, "queue", "stats", "jobs")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "jobs   3      0") {
		t.Fatalf("stats:\n%s", out)
	}
	out = mustRun(t, a, "receive", "jobs", "--max", "3", "--json")
	var got []map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 3 {
		t.Fatalf("receive --json: %v\n%s", err, out)
	}
	first := got[0]
	if first["id"] != id || first["body"] != "hello world" || first["type"] != "email" || first["attributes"].(map[string]any)["k"] != "v" {
		t.Fatalf("first received = %v", first)
	}
	r1, r2, r3 := first["receipt"].(string), got[1]["receipt"].(string), got[2]["receipt"].(string)
	if got[2]["body"] != "from\tstdin" {
		t.Fatalf("stdin body = %q", got[2]["body"])
	}
	out = mustRun(t, a, "extend", r1, "1m")
	if !strings.HasPrefix(out, "lease until ") {
		t.Fatalf("extend printed %q", out)
	}
	// Acking r1 again is a repeat of its ack, not an error.
	mustRun(t, a, "ack", r1)
	if out := mustRun(t, a, "ack", r2, r1); !strings.Contains(out, r2+"  acked") || !strings.Contains(out, r1+"  acked") {
		t.Fatalf("ack of a new and an already-acked receipt printed:\n%s", out)
	}
	mustRun(t, a, "nack", r3, "--delay", "0s", "--error", "bad\ninput")
	// A nacked lease is stale: exit 1, per-receipt table.
	if r := raftq(t, a, "", "ack", r3); r.code != exitServer || !strings.Contains(r.stdout, "stale receipt") {
		t.Fatalf("ack with a stale receipt: %+v", r)
	}
	out = mustRun(t, a, "receive", "jobs", "--wait", "2s")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], `"from\tstdin"`) {
		t.Fatalf("receive table:\n%s", out)
	}
	fields := strings.Fields(lines[1])
	mustRun(t, a, "nack", fields[2], "--error", "again")
	// Two receives reach max-receives 2: the message is dead.
	out = mustRun(t, a, "dlq", "list", "jobs")
	if !strings.Contains(out, fields[0]) || !strings.Contains(out, "max_receives") || !strings.Contains(out, "again") {
		t.Fatalf("dlq list:\n%s", out)
	}
	out = mustRun(t, a, "message", "get", fields[0])
	for _, want := range []string{"state        dead", "EPOCH", "nacked", `bad\ninput`} {
		if !strings.Contains(out, want) {
			t.Fatalf("message get lacks %q:\n%s", want, out)
		}
	}
	if out = mustRun(t, a, "dlq", "redrive", "jobs", "--ids", fields[0], "--rate", "10"); out != "redrove 1 message(s)\n" {
		t.Fatalf("redrive printed %q", out)
	}
	if out = mustRun(t, a, "dlq", "discard", "jobs", "--json"); strings.TrimSpace(out) != "{\n  \"discarded\": 0\n}" {
		t.Fatalf("discard printed %q", out)
	}
	if out = mustRun(t, a, "message", "cancel", fields[0]); out != "cancelled "+fields[0]+"\n" {
		t.Fatalf("cancel printed %q", out)
	}
	if out = mustRun(t, a, "queue", "purge", "jobs"); out != "purged 0 message(s) from \"jobs\"\n" {
		t.Fatalf("purge printed %q", out)
	}
	if out = mustRun(t, a, "queue", "list"); !strings.Contains(out, "jobs  standard  45s") {
		t.Fatalf("queue list:\n%s", out)
	}
	if out = mustRun(t, a, "cluster", "status"); !strings.Contains(out, s.NodeID) || !strings.Contains(out, "SHARD") {
		t.Fatalf("cluster status:\n%s", out)
	}
	if out = mustRun(t, a, "queue", "delete", "jobs"); out != "deleted queue \"jobs\"\n" {
		t.Fatalf("delete printed %q", out)
	}
}

func TestGlobalFlagsAnywhereAndEnv(t *testing.T) {
	s := clienttest.NewServer(t)
	// RAFTQ_ADDR points nowhere; --addr after the command wins.
	if r := raftq(t, "127.0.0.1:1", "", "queue", "list", "--addr", s.Addr, "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("global flags after the command: %+v", r)
	}
	if r := raftq(t, s.Addr, "", "--json", "queue", "list"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("RAFTQ_ADDR: %+v", r)
	}
}

func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		args, pos []string
		group     string
	}{
		{[]string{"q", "b", "--group", "g"}, []string{"q", "b"}, "g"},
		{[]string{"--group", "g", "q", "b"}, []string{"q", "b"}, "g"},
		{[]string{"q", "--group=g", "b"}, []string{"q", "b"}, "g"},
		{[]string{"q", "--", "--group", "x"}, []string{"q", "--group", "x"}, ""},
		{[]string{"q", "-"}, []string{"q", "-"}, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		g := fs.String("group", "", "")
		pos, err := parseInterleaved(fs, c.args)
		if err != nil || !reflect.DeepEqual(pos, c.pos) || *g != c.group {
			t.Errorf("parseInterleaved(%q) = %q, group %q, %v", c.args, pos, *g, err)
		}
	}
}

func TestPrintableAndJSONBody(t *testing.T) {
	for in, want := range map[string]string{"plain text": "plain text", "a\nb": `"a\nb"`, "\xff": `"\xff"`, "": ""} {
		if got := printable([]byte(in)); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	v := map[string]any{}
	jsonBody([]byte{0xff, 0}, v)
	if v["body_base64"] != "/wA=" || v["body"] != nil {
		t.Fatalf("binary body JSON = %v", v)
	}
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{usagef("x"), exitUsage},
		{client.ErrUnavailable, exitUnavailable},
		{context.DeadlineExceeded, exitUnavailable},
		{client.ErrNotFound, exitServer},
		{&client.Error{Code: 14, Msg: "no leader"}, exitUnavailable},
		{&client.Error{Code: 9, Msg: "stale"}, exitServer},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
