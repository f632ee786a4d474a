package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/wire"
)

// ErrShrink refuses a smaller shard count: a shard's messages and dedup
// keys cannot be merged into another's, so the count only grows.
var ErrShrink = errors.New("the shard count only grows; shrinking is not supported (back up and restore into a new cluster instead)")

// ErrTooManyShards refuses a count above the cluster's slot count.
var ErrTooManyShards = errors.New("more shards than hash slots")

// ErrTooFewNodes refuses a growth while fewer nodes can take a new shard's
// replicas than the replication asks for; it passes once they can.
var ErrTooFewNodes = errors.New("too few nodes can take replicas now")

// GrowStatus is a shard-count change as the meta leader sees it.
type GrowStatus struct {
	Previous, Count uint32
	Slots           uint32
	NewShards       map[uint32][]string // the new shards' replicas
	Moves           []SlotMoveStatus    // running first, then planned
	SlotsPerShard   []uint32
}

// SlotMoveStatus is one slot move, running or planned.
type SlotMoveStatus struct {
	ID       uint64 // 0: planned
	From, To uint32
	Slots    int
	Phase    string
	// HeldGroups is how many FIFO groups of a move in route the old shard
	// still has messages of, as the meta leader last looked: the new
	// shard holds their new messages until they are gone.
	HeldGroups int
}

// SetShardCount grows the data shards to count: it records the new shards
// and their replicas in meta, after which the resharding duty
// (reshard.go) moves slots onto them. A count of 0 or equal to the
// current one reports progress; dryRun only plans. Only the meta leader answers;
// elsewhere it returns a *raftgroup.NotLeaderError naming the leader.
func (n *Node) SetShardCount(ctx context.Context, count uint32, dryRun bool) (GrowStatus, error) {
	if !n.meta.IsLeader() {
		return GrowStatus{}, &raftgroup.NotLeaderError{Group: metaGroup, LeaderID: n.meta.LeaderID()}
	}
	m := n.meta.ShardMap()
	if !m.Placed() {
		return GrowStatus{}, errors.New("the shard map is not placed yet")
	}
	st := GrowStatus{Previous: m.Count, Count: m.Count, Slots: m.Table().Slots}
	if count == 0 {
		count = m.Count // a progress report
	}
	switch {
	case count < m.Count:
		return st, fmt.Errorf("%w: the cluster has %d shards, asked for %d", ErrShrink, m.Count, count)
	case count > st.Slots:
		return st, fmt.Errorf("%w: the cluster has %d slots (%d per bootstrap shard), asked for %d shards", ErrTooManyShards, st.Slots, wire.SlotsPerShard, count)
	}
	grown := m
	if count > m.Count {
		elig, _, err := n.balanceEligible(m)
		if err != nil {
			return st, err
		}
		holders, err := n.replicaHolders(m)
		if err != nil {
			return st, err
		}
		// A new shard gets the cluster's replication (fewer only where the
		// cluster has fewer members), never fewer because some members are
		// not eligible yet (just started, clock not yet checked) or are
		// down: a shard placed on fewer replicas would acknowledge sends
		// that fewer nodes hold than the replication promises.
		if want := min(n.cfg.Replication, holders); len(elig) < want {
			return st, fmt.Errorf("%w: a new shard needs %d replicas and %d of the cluster's %d nodes can take one now (%s): "+
				"a member that is down must come back or be replaced (raftq cluster replace-node), one being drained must finish, "+
				"and a node that just started counts once it has been up for %v with its clock checked",
				ErrTooFewNodes, want, len(elig), holders, strings.Join(elig, ", "), n.cfg.NonvoterGrace)
		}
		replicas, err := meta.PlanGrowth(m, count, elig, n.cfg.Replication)
		if err != nil {
			return st, fmt.Errorf("place %d new shards: %w", count-m.Count, err)
		}
		st.NewShards = replicas
		if dryRun {
			grown = meta.Grown(m, count, replicas)
		} else {
			addrs := map[string]string{}
			for _, nodes := range replicas {
				for _, id := range nodes {
					tm, ok := n.gossip.get(id)
					if !ok || tm.RaftAddr == "" {
						return st, fmt.Errorf("node %s has no known raft address", id)
					}
					// The new shards bootstrap with these addresses
					// (shards.go): gossip's word is not enough.
					if _, done := addrs[id]; !done && !n.proves(ctx, id, tm.RaftAddr) {
						return st, fmt.Errorf("node %s at %s did not prove its identity; not placing shards on it", id, tm.RaftAddr)
					}
					addrs[id] = tm.RaftAddr
				}
			}
			if err := n.meta.GrowShards(ctx, count, replicas, addrs); err != nil {
				return st, err
			}
			n.logger.Info("resharding: shard count grown", "from", m.Count, "to", count, "new_replicas", replicas)
			grown = n.meta.ShardMap()
		}
		st.Count = grown.Count
	}
	st.Moves = n.slotMoveStatus(grown)
	st.SlotsPerShard = slotsPerShard(grown)
	return st, nil
}

// slotMoveStatus lists the running slot moves, then the planned ones.
func (n *Node) slotMoveStatus(m meta.ShardMap) []SlotMoveStatus {
	var out []SlotMoveStatus
	r := &n.reshard
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, mv := range m.SlotMoves {
		st := SlotMoveStatus{ID: mv.ID, From: mv.From, To: mv.To, Slots: len(mv.Slots),
			Phase: strings.ToLower(strings.TrimPrefix(mv.Phase.String(), "SLOT_MOVE_PHASE_"))}
		if mv.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_ROUTE {
			st.HeldGroups = len(r.live[mv.ID])
		}
		out = append(out, st)
	}
	for _, mv := range meta.PlanSlotMoves(m) {
		if slices.ContainsFunc(m.SlotMoves, func(r meta.SlotMove) bool {
			return r.Phase == metapb.SlotMovePhase_SLOT_MOVE_PHASE_SEAL && r.From == mv.From && r.To == mv.To
		}) {
			continue // recorded, not yet routed: the table still names from
		}
		out = append(out, SlotMoveStatus{From: mv.From, To: mv.To, Slots: len(mv.Slots), Phase: "planned"})
	}
	return out
}

func slotsPerShard(m meta.ShardMap) []uint32 {
	out := make([]uint32, m.Count)
	t := m.Table()
	for s := range t.Slots {
		if o := t.Owner(s); o < m.Count {
			out[o]++
		}
	}
	return out
}

// replicaHolders counts the members that may hold replicas once they are
// up: the servers of the meta group that are neither retired nor being
// drained.
func (n *Node) replicaHolders(m meta.ShardMap) (int, error) {
	cfg, err := n.metaConfiguration()
	if err != nil {
		return 0, err
	}
	count := 0
	for _, srv := range cfg.Servers {
		id := string(srv.ID)
		if m.IsRetired(id) || slices.ContainsFunc(m.Drains, func(d meta.Drain) bool { return d.Node == id }) {
			continue
		}
		count++
	}
	return count, nil
}
