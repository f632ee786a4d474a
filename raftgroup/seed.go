package raftgroup

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// Seed is a state a new group starts from instead of an empty one: a
// backup's piece (raftq-node --restore). Open returns the FSM's snapshot
// bytes; Index and Term become the snapshot's raft index and term.
type Seed struct {
	Index, Term uint64
	Open        func() (io.ReadCloser, error)
}

// keyCurrentTerm is hashicorp/raft's stable-store key for the current
// term (raft.go, keyCurrentTerm).
var keyCurrentTerm = []byte("CurrentTerm")

// seedGroup is BootstrapCluster with a state: it writes the seed as the
// replica's only snapshot, whose configuration is conf, and sets the
// current term to the seed's, so raft starts from (Index, Term, conf) as
// if the group had just compacted its log there. Every replica that seeds
// writes the same snapshot, so they start identical and agree on the
// log from then on; terms keep rising from the seed's, so records in the
// state that compare terms (leases, the leader grace) stay ordered. A
// replica with any raft state is left alone, as BootstrapCluster does.
func seedGroup(seed *Seed, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport, conf raft.Configuration) error {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("check state: %w", err)
	}
	if has {
		return nil
	}
	if seed.Index == 0 || seed.Term == 0 {
		return errors.New("seed needs an index and a term above 0")
	}
	rc, err := seed.Open()
	if err != nil {
		return fmt.Errorf("open seed: %w", err)
	}
	defer rc.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, seed.Index, seed.Term, conf, seed.Index, trans)
	if err != nil {
		return fmt.Errorf("create snapshot: %w", err)
	}
	if _, err := io.Copy(sink, rc); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close snapshot: %w", err)
	}
	// A crash anywhere before OpenRaft's MarkReady leaves the replica in
	// its creating state, which raftstore wipes and seeds again.
	if err := stable.SetUint64(keyCurrentTerm, seed.Term); err != nil {
		return fmt.Errorf("set term: %w", err)
	}
	return nil
}
