package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/raftstore"
)

// writeDataDir makes a node's data directory the way a node does: node.json,
// the meta replica and shard 0's, each with entries 1-50 in term 2.
func writeDataDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	n, err := raftstore.OpenNode(root, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Create("n1"); err != nil {
		t.Fatal(err)
	}
	for group, dir := range map[string]string{"meta": filepath.Join(root, "meta"), "shard-0": filepath.Join(root, "shards", "0")} {
		r := openReplica(t, n, group, dir)
		if err := r.MarkReady(); err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 50; i++ {
			l := raftstore.Command(fmt.Appendf(nil, "%s-%d", group, i))
			l.Index, l.Term = i, 2
			if err := r.Logs().StoreLogs([]*raft.Log{&l}); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Stable().SetUint64([]byte("CurrentTerm"), 2); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func openReplica(t *testing.T, n *raftstore.Node, group, dir string) *raftstore.Replica {
	t.Helper()
	r, err := raftstore.Open(raftstore.Options{Dir: dir, NodeID: "n1", Group: group, Node: n,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func runVerifyCmd(args ...string) (code int, stdout, stderr string) {
	return runVerifyEnv(map[string]string{}, args...)
}

func runVerifyEnv(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = verifyMain(args, func(k string) string { return env[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVerifyCommand(t *testing.T) {
	root := writeDataDir(t)
	code, out, errOut := runVerifyCmd("--data-dir", root)
	if code != verifyIntact {
		t.Fatalf("intact directory: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"meta: OK: log 1-50 (wal), term 2, durable to index 50 in term 2", "shard-0: OK: log 1-50", "all 2 replicas intact"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	// RAFTQ_DATA_DIR stands for the flag, as for the node.
	if code, envOut, _ := runVerifyEnv(map[string]string{"RAFTQ_DATA_DIR": root}); code != verifyIntact || envOut != out {
		t.Fatalf("with RAFTQ_DATA_DIR: exit %d\n%s", code, envOut)
	}

	facts := filepath.Join(root, "shards", "0", "facts")
	if err := os.Remove(facts); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runVerifyCmd("--data-dir", root)
	if code != verifyDamaged {
		t.Fatalf("damaged directory: exit %d\n%s%s", code, out, errOut)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "shard-0: ") {
			if line != "" {
				t.Fatalf("more than one line for shard-0:\n%s", out)
			}
			line = l
		}
	}
	for _, want := range []string{"shard-0: DAMAGED store-missing:", "file " + facts, "to do: ", "raftq cluster repair n1"} {
		if !strings.Contains(line, want) {
			t.Fatalf("shard-0's line lacks %q: %s", want, line)
		}
	}
	if !strings.Contains(out, "meta: OK") || !strings.Contains(out, "1 of 2 replicas damaged") {
		t.Fatalf("output:\n%s", out)
	}

	code, out, _ = runVerifyCmd("--data-dir", root, "--json")
	if code != verifyDamaged {
		t.Fatalf("--json: exit %d", code)
	}
	var rep struct {
		Damaged bool   `json:"damaged"`
		NodeID  string `json:"node_id"`
		Groups  []struct {
			Group    string                  `json:"group"`
			Problems []raftstore.DamageError `json:"problems"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, out)
	}
	if !rep.Damaged || rep.NodeID != "n1" || len(rep.Groups) != 2 || rep.Groups[1].Group != "shard-0" ||
		len(rep.Groups[1].Problems) != 1 || rep.Groups[1].Problems[0].Reason != raftstore.ReasonStoreMissing ||
		rep.Groups[1].Problems[0].File != facts {
		t.Fatalf("--json report: %+v", rep)
	}
}

func TestVerifyCommandCannotCheck(t *testing.T) {
	root := writeDataDir(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no data dir", nil, "--data-dir (or RAFTQ_DATA_DIR) is required"},
		{"extra argument", []string{"--data-dir", root, "now"}, `unexpected argument "now"`},
		{"unknown flag", []string{"--data-dir", root, "--fix"}, "flag provided but not defined"},
		{"not a data directory", []string{"--data-dir", t.TempDir()}, "not a raftq data directory"},
		{"missing directory", []string{"--data-dir", filepath.Join(root, "nope")}, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runVerifyCmd(tc.args...)
			if code != verifyNotRun || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q (want %d and %q), stdout %q", code, errOut, verifyNotRun, tc.want, out)
			}
		})
	}
	if code, _, _ := runVerifyCmd("-h"); code != verifyIntact {
		t.Fatalf("-h: exit %d", code)
	}

	// A replica held open, as by a running node: the check says so and
	// returns instead of waiting for the lock.
	n, err := raftstore.OpenNode(root, "n1")
	if err != nil {
		t.Fatal(err)
	}
	r := openReplica(t, n, "shard-0", filepath.Join(root, "shards", "0"))
	defer r.Close()
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runVerifyCmd("--data-dir", root)
		done <- result{code, out, errOut}
	}()
	select {
	case res := <-done:
		if res.code != verifyNotRun || !strings.Contains(res.errOut, "the node is running; stop it first") {
			t.Fatalf("verify of a running node: exit %d\n%s%s", res.code, res.out, res.errOut)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("verify of a running node did not answer")
	}
}
