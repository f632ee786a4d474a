package raftmux

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

func heartbeat(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("leader"), Addr: []byte("leader-addr")},
		Term:      term,
	}
}

// answerHeartbeats makes tr's raft answer heartbeats with term, counting them.
func answerHeartbeats(tr raft.Transport, term uint64, n *atomic.Int64) {
	tr.SetHeartbeatHandler(func(rpc raft.RPC) {
		n.Add(1)
		rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
	})
}

// The heartbeats of quiet groups to one node travel as one batch, each
// answered by its own group; a busy group's heartbeats and anything that
// is not a heartbeat go directly.
func TestBeats_QuietHeartbeatsTravelTogether(t *testing.T) {
	a, b := mustListen(t), mustListen(t)
	const groups = 20
	var answered atomic.Int64
	senders := make([]raft.Transport, groups)
	for i := range groups {
		g := fmt.Sprintf("shard-%d", i)
		answerHeartbeats(mustTransport(t, b, g), uint64(100+i), &answered)
		senders[i] = mustTransport(t, a, g)
		senders[i].(*gatedTransport).SetQuiet(true)
	}
	var wg sync.WaitGroup
	errs := make([]error, groups)
	for i := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp raft.AppendEntriesResponse
			errs[i] = senders[i].AppendEntries("b", raft.ServerAddress(b.Addr()), heartbeat(7), &resp)
			if errs[i] == nil && (resp.Term != uint64(100+i) || !resp.Success) {
				errs[i] = fmt.Errorf("group %d answered term %d success %v", i, resp.Term, resp.Success)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("heartbeat %d: %v", i, err)
		}
	}
	if n := b.beats.batches.Load(); n == 0 || n > 3 {
		t.Fatalf("%d heartbeats sent at once arrived in %d batches; want 1 (or a few on a slow machine)", groups, n)
	}
	if answered.Load() != groups {
		t.Fatalf("%d heartbeats handled, want %d", answered.Load(), groups)
	}

	// Awake: directly.
	before := b.beats.batches.Load()
	senders[0].(*gatedTransport).SetQuiet(false)
	var resp raft.AppendEntriesResponse
	if err := senders[0].AppendEntries("b", raft.ServerAddress(b.Addr()), heartbeat(7), &resp); err != nil || resp.Term != 100 {
		t.Fatalf("awake heartbeat: %v, term %d", err, resp.Term)
	}
	// Quiet, but not a heartbeat (it carries a commit index): directly, to
	// raft's main loop.
	senders[1].(*gatedTransport).SetQuiet(true)
	serve(b.groupTransport(t, "shard-1"), 55)
	req := heartbeat(7)
	req.LeaderCommitIndex = 3
	if err := senders[1].AppendEntries("b", raft.ServerAddress(b.Addr()), req, &resp); err != nil || resp.Term != 55 {
		t.Fatalf("append from a quiet group: %v, term %d (want the main loop's 55)", err, resp.Term)
	}
	if n := b.beats.batches.Load(); n != before {
		t.Fatalf("%d batches after a busy heartbeat and an append; want none", n-before)
	}
}

// groupTransport finds the gated transport registered for group on m.
func (m *Mux) groupTransport(t *testing.T, group string) *gatedTransport {
	t.Helper()
	m.beats.mu.Lock()
	defer m.beats.mu.Unlock()
	tr := m.beats.handlers[group]
	if tr == nil {
		t.Fatalf("no transport for %s", group)
	}
	return tr
}

// A peer without coalesced heartbeats (its Mux knows no beats layer, as
// before this change) still gets every heartbeat, directly.
func TestBeats_PeerWithoutBeatsGetsThemDirectly(t *testing.T) {
	a, b := mustListen(t), mustListen(t)
	_ = b.beats.l.Close() // b now refuses the batch connection like an older node
	var answered atomic.Int64
	answerHeartbeats(mustTransport(t, b, "meta"), 9, &answered)
	tr := mustTransport(t, a, "meta")
	tr.(*gatedTransport).SetQuiet(true)
	for range 3 {
		var resp raft.AppendEntriesResponse
		if err := tr.AppendEntries("b", raft.ServerAddress(b.Addr()), heartbeat(7), &resp); err != nil || resp.Term != 9 {
			t.Fatalf("heartbeat: %v, term %d", err, resp.Term)
		}
	}
	if answered.Load() != 3 {
		t.Fatalf("%d heartbeats handled, want 3", answered.Load())
	}
}

// A heartbeat for a group the peer does not host fails, as a direct one
// does; the batch connection stays up for the others.
func TestBeats_UnknownGroupFails(t *testing.T) {
	a, b := mustListen(t), mustListen(t)
	var answered atomic.Int64
	answerHeartbeats(mustTransport(t, b, "shard-1"), 9, &answered)
	known, unknown := mustTransport(t, a, "shard-1"), mustTransport(t, a, "shard-2")
	known.(*gatedTransport).SetQuiet(true)
	unknown.(*gatedTransport).SetQuiet(true)
	var resp raft.AppendEntriesResponse
	err := unknown.AppendEntries("b", raft.ServerAddress(b.Addr()), heartbeat(7), &resp)
	if err == nil || !strings.Contains(err.Error(), `no raft group "shard-2"`) {
		t.Fatalf("heartbeat for a group b does not host: %v", err)
	}
	if err := known.AppendEntries("b", raft.ServerAddress(b.Addr()), heartbeat(7), &resp); err != nil || resp.Term != 9 {
		t.Fatalf("heartbeat: %v, term %d", err, resp.Term)
	}
	if b.beats.batches.Load() != 2 {
		t.Fatalf("%d batches, want 2 (both went coalesced)", b.beats.batches.Load())
	}
}
