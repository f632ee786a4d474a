package shard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// formatRecord stands in for the meta group's record of node formats.
type formatRecord struct {
	mu sync.Mutex
	m  map[string]uint32
}

func (r *formatRecord) get(id string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

func (r *formatRecord) set(id string, n uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[id] = n
}

// A leader of a real three-replica shard, with one follower pinned at log
// format 1, refuses a kind that needs format 2 before it reaches the log,
// naming the lagging follower; it proposes the kind once that follower has
// recorded format 2, and every replica applies it. Kinds of the base format
// pass meanwhile.
func TestNewKindWaitsForEveryReplica(t *testing.T) {
	rec := &formatRecord{m: map[string]uint32{}}
	c := newCluster(t, 3, true, fastTuning(), func(c *cluster) {
		c.nodeFormat = rec.get
		c.kindFormat = func(cmd *fsmpb.Command) uint32 {
			if _, ok := cmd.GetCmd().(*fsmpb.Command_DeleteQueue); ok {
				return 2 // stands for a kind a newer release adds
			}
			return fsm.CommandFormat(cmd)
		}
	})
	leader := c.leader()
	old := c.followers(leader)[0]
	for _, nd := range c.nodes {
		rec.set(nd.id, 2)
	}
	rec.set(old.id, 1)
	mustQueue(t, leader.sh, "q", nil) // base format: not gated

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := &fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: "q"}}}
	_, err := leader.sh.Propose(ctx, del)
	var lag *fsm.FormatLagError
	if !errors.As(err, &lag) {
		t.Fatalf("delete with %s at format 1: %v, want a FormatLagError", old.id, err)
	}
	if len(lag.Lagging) != 1 || lag.Lagging[0] != (fsm.NodeFormat{NodeID: old.id, Format: 1}) || lag.Group != GroupName(c.shardID) {
		t.Fatalf("lag %+v, want only %s at format 1 in %s", lag, old.id, GroupName(c.shardID))
	}
	if !strings.Contains(err.Error(), old.id+" (format 1)") || !strings.Contains(err.Error(), "delete_queue") {
		t.Errorf("error %q does not name the lagging replica and the kind", err)
	}
	c.converge()
	for _, nd := range c.live() {
		if _, ok := nd.sh.FSM().Queues()["q"]; !ok {
			t.Fatalf("%s lost queue q to a refused delete", nd.id)
		}
	}

	rec.set(old.id, 2)
	mustPropose(t, leader.sh, del)
	c.converge()
	for _, nd := range c.live() {
		if _, ok := nd.sh.FSM().Queues()["q"]; ok {
			t.Fatalf("%s still has queue q after the delete was accepted", nd.id)
		}
	}
}
