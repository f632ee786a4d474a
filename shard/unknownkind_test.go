package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftstore"
)

const unknownKindChildEnv = "RAFTQ_TEST_UNKNOWN_KIND_DIR"

// A log entry with a command kind this binary does not know stops the
// node's process through raft's apply (a panic is not recovered anywhere on
// the way), and raft does not skip past it: the entry stays in the durable
// log and no snapshot covers it, so a restart on a binary that knows the
// kind applies it. The replica runs in a child process, which must die.
func TestUnknownKindStopsNode(t *testing.T) {
	if dir := os.Getenv(unknownKindChildEnv); dir != "" {
		unknownKindChild(t, dir)
		return
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestUnknownKindStopsNode$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), unknownKindChildEnv+"="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("child: %v, want a panic (exit status 2); output:\n%s", err, out.String())
	}
	m := regexp.MustCompile(`panic: fsm: log index (\d+) term \d+: unknown command kind 999 \(field of raftq\.fsm\.v1\.Command\); this binary \(.+, log format ` + strconv.Itoa(int(fsm.LogFormat)) + `\) cannot apply it and stops rather than diverge`).FindSubmatch(out.Bytes())
	if m == nil {
		t.Fatalf("child did not stop with the unknown-kind message; output:\n%s", out.String())
	}
	index, _ := strconv.ParseUint(string(m[1]), 10, 64)

	rep, err := raftstore.Open(raftstore.Options{Dir: dir, NodeID: "n1", Group: GroupName(1)})
	if err != nil {
		t.Fatalf("reopen the stopped replica's stores: %v", err)
	}
	defer rep.Close()
	var l raft.Log
	if err := rep.Logs().GetLog(index, &l); err != nil {
		t.Fatalf("entry %d is not in the stopped replica's log: %v", index, err)
	}
	e, err := fsm.DecodeEntry(l.Data)
	if err != nil || len(e.GetCommands()) != 1 || fsm.KindName(e.GetCommands()[0]) != "kind 999" {
		t.Fatalf("entry %d holds %v (%v), want the unknown command", index, e, err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 1, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Index >= index {
			t.Fatalf("snapshot %s covers index %d: a restart would skip the entry", s.ID, s.Index)
		}
	}
}

// unknownKindChild runs one replica in dir, commits an ordinary command,
// then one of kind 999 (as a newer leader would write it), and waits; its
// FSM must end the process before the wait does.
func unknownKindChild(t *testing.T, dir string) {
	addr, tr := raft.NewInmemTransport("n1")
	s, err := Open(Config{
		ID: 1, NodeID: "n1", Dir: dir, Transport: tr, Logger: testLogger(), Raft: fastTuning(),
		Bootstrap: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: addr}},
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustQueue(t, s, "q", nil)
	raw := protowire.AppendTag(nil, 999, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte{0x0a, 0x01, 'q'})
	c := &fsmpb.Command{}
	c.ProtoReflect().SetUnknown(raw)
	data, err := fsm.EncodeEntry(&fsmpb.Entry{Version: fsm.EntryVersion, NowMs: time.Now().UnixMilli(), Commands: []*fsmpb.Command{c}})
	if err != nil {
		t.Fatal(err)
	}
	f := s.Raft().ApplyLog(raftstore.Command(data), 0)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		fmt.Printf("the unknown command was answered (%v, response %v) instead of stopping the node\n", err, f.Response())
	case <-time.After(30 * time.Second):
		fmt.Println("the node did not stop within 30 s of the unknown command")
	}
	os.Exit(0) // the parent wants exit status 2, the panic's
}
