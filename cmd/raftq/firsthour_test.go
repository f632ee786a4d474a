package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client/clienttest"
)

// --help prints its text once, to stdout, for the program, every command,
// the command groups and "raftq help ...".
func TestHelpPrintsOnce(t *testing.T) {
	cases := [][]string{{"--help"}, {"-h"}, {"help"}, {"cluster", "--help"}, {"queue", "--help"}, {"help", "queue"}, {"help", "queue", "create"}}
	for _, c := range commands() {
		cases = append(cases, append(strings.Fields(c.path), "--help"))
	}
	for _, args := range cases {
		r := raftq(t, "", "", args...)
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("raftq %v: exit %d, stderr %q; want 0 and nothing on stderr", args, r.code, r.stderr)
			continue
		}
		if n := strings.Count(r.stdout, "usage: raftq"); n != 1 {
			t.Errorf("raftq %v: %d usage lines in %q", args, n, r.stdout)
		}
		if strings.Contains(r.stdout, "  [flags]") {
			t.Errorf("raftq %v: double space in %q", args, r.stdout)
		}
	}
	for _, word := range []string{"queue", "cluster", "message", "dlq"} {
		r := raftq(t, "", "", word, "--help")
		for _, c := range group(word) {
			if !strings.Contains(r.stdout, c.path) {
				t.Errorf("raftq %s --help lacks %q:\n%s", word, c.path, r.stdout)
			}
		}
	}
	// update's flags keep the queue's values when left out; create's
	// defaults are create's.
	up := raftq(t, "", "", "queue", "update", "--help").stdout
	if !strings.Contains(up, "unchanged if not given") || strings.Contains(up, "(default 10)") {
		t.Errorf("queue update --help:\n%s", up)
	}
	if cr := raftq(t, "", "", "queue", "create", "--help").stdout; !strings.Contains(cr, "(default 10)") {
		t.Errorf("queue create --help lacks create's defaults:\n%s", cr)
	}
}

// The command's deadline covers --wait: a long poll longer than --timeout
// ends with its (empty) answer, not a cancelled stream and exit 3.
func TestReceiveWaitOutlastsTimeout(t *testing.T) {
	s := clienttest.NewServer(t)
	mustRun(t, s.Addr, "queue", "create", "jobs")
	began := time.Now()
	r := raftq(t, s.Addr, "", "--timeout", "1s", "receive", "jobs", "--wait", "3s")
	if r.code != exitOK || r.stdout != "no messages\n" {
		t.Fatalf("receive --wait 3s --timeout 1s: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if took := time.Since(began); took < 3*time.Second {
		t.Fatalf("receive returned after %v, before its 3s wait", took)
	}
	if out := mustRun(t, s.Addr, "receive", "jobs", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty receive --json = %q", out)
	}
}

// cluster status fails (exit 3) while a shard has no leader, saying which,
// and --wait waits for it.
func TestStatusExitsNonZeroUntilReady(t *testing.T) {
	s := clienttest.NewServer(t)
	s.SetShardMap(0, "")
	r := raftq(t, s.Addr, "", "cluster", "status")
	if r.code != exitUnavailable || !strings.Contains(r.stderr, "cluster not ready: shard 0 has no leader") ||
		!strings.Contains(r.stderr, "--wait") || !strings.Contains(r.stdout, "SHARD") {
		t.Fatalf("status without a shard leader: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		s.SetShardMap(0, s.Addr)
	}()
	r = raftq(t, s.Addr, "", "cluster", "status", "--wait", "20s")
	if r.code != exitOK || r.stderr != "" || !strings.Contains(r.stdout, s.Addr) {
		t.Fatalf("status --wait: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// A failed ack shows each receipt's error once: in the table. stderr only
// counts.
func TestFailedAckPrintsTheErrorOnce(t *testing.T) {
	s := clienttest.NewServer(t)
	mustRun(t, s.Addr, "queue", "create", "jobs")
	mustRun(t, s.Addr, "send", "jobs", "x")
	var got []map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, s.Addr, "receive", "jobs", "--json")), &got); err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	receipt := got[0]["receipt"].(string)
	mustRun(t, s.Addr, "nack", receipt)
	r := raftq(t, s.Addr, "", "ack", receipt)
	if r.code != exitServer || strings.Count(r.stdout+r.stderr, "stale receipt") != 1 || r.stderr != "raftq: 1 of 1 receipt(s) not acked\n" {
		t.Fatalf("ack of a nacked receipt: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// Refusals a new user meets, in words they can act on.
func TestErrorTexts(t *testing.T) {
	s := clienttest.NewServer(t)
	mustRun(t, s.Addr, "queue", "create", "jobs")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "create", "jobs", "--visibility", "1m"}, "raftq: queue \"jobs\" exists with a different policy; raftq queue update jobs changes it\n"},
		{[]string{"queue", "update", "jobs", "--fifo"}, "raftq: queue \"jobs\": a queue's mode cannot change\n"},
		{[]string{"dlq", "list", "nosuch"}, "raftq: queue \"nosuch\" not found\n"},
	} {
		r := raftq(t, s.Addr, "", c.args...)
		if r.code != exitServer || r.stderr != c.want {
			t.Errorf("raftq %v: exit %d, stderr %q; want exit 1, %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// Times keep their width: milliseconds are always printed.
func TestTimestampsKeepTheirWidth(t *testing.T) {
	for _, ms := range []int64{1767225600000, 1767225600100, 1767225600123} {
		if got := ts(time.UnixMilli(ms)); len(got) != len("2026-01-01T00:00:00.000Z") {
			t.Errorf("ts(%d) = %q", ms, got)
		}
	}
}

// The bash completion script completes commands, subcommands and each
// command's flags, skipping flag values.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var script bytes.Buffer
	if err := completionScript(&script, "bash"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		words string
		want  string
	}{
		{"raftq qu", "queue"},
		{"raftq queue cr", "create"},
		{"raftq --addr x:1 cl", "cluster"},
		{"raftq queue create jobs --vis", "--visibility"},
		{"raftq receive jobs --max 3 --w", "--wait"},
		{"raftq cluster status --w", "--wait"},
		{"raftq completion z", "zsh"},
		{"raftq send q b --pr", "--priority"},
	} {
		words := strings.Fields(c.words)
		prog := script.String() + "\nCOMP_WORDS=(" + strings.Join(words, " ") + ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n_raftq\necho \"${COMPREPLY[*]}\"\n"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, bash, "--norc", "-c", prog).CombinedOutput()
		cancel()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("completing %q: %q, %v; want %q", c.words, out, err, c.want)
		}
	}
	if z, err := exec.LookPath("zsh"); err == nil {
		var zs bytes.Buffer
		if err := completionScript(&zs, "zsh"); err != nil {
			t.Fatal(err)
		}
		// zsh calls the function through bashcompinit in sh emulation and
		// filters the words itself, so the reply lists every subcommand.
		prog := zs.String() + "\ncomplete -p\nemulate sh -c 'COMP_WORDS=(raftq queue cr); COMP_CWORD=2; _raftq; echo \"${COMPREPLY[*]}\"'\n"
		out, err := exec.Command(z, "-f", "-c", prog).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "complete -F _raftq raftq") || !strings.Contains(string(out), "create list get update") {
			t.Errorf("zsh completion: %q, %v", out, err)
		}
	}
}

// cluster status --wait also waits for a node to answer at all: a script
// can run it right after starting the cluster.
func TestStatusWaitsForANodeToAnswer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	started := make(chan *clienttest.Server, 1)
	go func() {
		// Past the client's own dial retries (at most 6.6 s).
		time.Sleep(8 * time.Second)
		s, err := clienttest.StartAt(addr)
		if err != nil {
			t.Errorf("StartAt: %v", err)
		}
		started <- s
	}()
	r := raftq(t, addr, "", "--timeout", "2s", "cluster", "status", "--wait", "30s")
	if s := <-started; s != nil {
		defer s.Stop()
	}
	if r.code != exitOK || !strings.Contains(r.stdout, "SHARD") {
		t.Fatalf("status --wait before any node answered: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
