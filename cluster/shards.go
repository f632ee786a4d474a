package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
	"github.com/raftq/raftq/shard"
)

// shardSet holds the shard replicas this node hosts and leader hints for the
// ones it does not.
type shardSet struct {
	n *Node

	mu     sync.RWMutex
	local  map[uint32]*shard.Shard
	hints  map[uint32]string
	placed meta.ShardMap
	// damaged holds the replicas found damaged (at open or while running):
	// they are not opened again until repaired (Node.Repair).
	damaged map[uint32]*raftstore.DamageError
	// stops ends the per-replica loops of each open replica when it is
	// closed because the map no longer assigns it here.
	stops map[uint32]context.CancelFunc
	wake  chan struct{} // cap 1: open what is assigned again
	// count caches placed.Count: the count never changes once placed, and
	// every request asks for it.
	count atomic.Uint32
	// table caches the slot table with the meta index it was read at
	// (slottable.go): every keyed send asks for it.
	table atomic.Pointer[tableAt]
}

func newShardSet(n *Node) *shardSet {
	return &shardSet{n: n, local: map[uint32]*shard.Shard{}, hints: map[uint32]string{},
		damaged: map[uint32]*raftstore.DamageError{}, stops: map[uint32]context.CancelFunc{}, wake: make(chan struct{}, 1)}
}

// manageLoop waits until the node's identity is settled and the shard map
// is known, then keeps this node's shards open: it opens each assigned
// replica (retrying failures), skips damaged ones until they are repaired,
// and marks the node ready once every assigned replica is open or known
// damaged.
func (ss *shardSet) manageLoop(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-ss.n.verifiedCh():
	}
	changes, stop := ss.n.meta.Changes()
	defer stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		m := ss.n.meta.ShardMap()
		if ss.n.retired.Load() {
			// Retired (retired.go): close what is open, open nothing.
			if err := ss.closeAll(ctx); err != nil {
				ss.n.logger.Warn("closing the replicas of a retired node", "err", err)
			}
		} else if m.Placed() {
			ss.n.recordClusterID(m)
			ss.mu.Lock()
			ss.placed = m
			ss.mu.Unlock()
			ss.count.Store(m.Count)
			ss.closeUnassigned(ctx, m)
			if ss.openAssigned(ctx, m) && !isDone(ss.n.ready) {
				ss.n.markReady()
				ss.n.logger.Info("node ready", "local_shards", m.ShardsOf(ss.n.cfg.NodeID), "damaged", ss.damagedIDs())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-tick.C:
		case <-ss.wake:
		}
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// kick makes manageLoop look at the assigned replicas again now.
func (ss *shardSet) kick() {
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// openAssigned opens every assigned shard not open yet and not damaged; it
// reports whether each is open or damaged.
func (ss *shardSet) openAssigned(ctx context.Context, m meta.ShardMap) bool {
	all := true
	for _, id := range m.ShardsOf(ss.n.cfg.NodeID) {
		if ss.get(id) != nil || ss.damage(id) != nil {
			continue
		}
		s, err := ss.open(id, m)
		if d, ok := raftstore.IsDamage(err); ok {
			ss.setDamaged(id, d)
			continue
		}
		if err != nil {
			ss.n.logger.Error("opening shard; will retry", "shard", id, "err", err)
			all = false
			continue
		}
		ss.n.leaders.watch(shard.GroupName(id), s.Raft(), ss.n.cfg.NodeID)
		ss.n.clock.applyMu.Lock()
		ss.mu.Lock()
		ss.local[id] = s
		ss.mu.Unlock()
		ss.n.clock.applyShard(s)
		ss.n.clock.applyMu.Unlock()
		rctx, stop := context.WithCancel(ss.n.ctx)
		ss.mu.Lock()
		ss.stops[id] = stop
		ss.mu.Unlock()
		ss.n.goLoop(func(context.Context) { ss.n.reconcileLoop(rctx, id, s) })
	}
	return all
}

// setDamaged records a damaged replica (once) and says so.
func (ss *shardSet) setDamaged(id uint32, d *raftstore.DamageError) {
	ss.mu.Lock()
	_, seen := ss.damaged[id]
	ss.damaged[id] = d
	ss.mu.Unlock()
	if !seen {
		ss.n.logger.Error("shard replica damaged: it does not vote or serve until repaired",
			"shard", id, "reason", d.Reason, "detail", d.Detail, "file", d.File, "index", d.Index,
			"repair", "raftq cluster repair "+ss.n.cfg.NodeID+" (or restart with --repair); docs/operations.md")
	}
}

func (ss *shardSet) damage(id uint32) *raftstore.DamageError {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return ss.damaged[id]
}

func (ss *shardSet) clearDamage(id uint32) {
	ss.mu.Lock()
	delete(ss.damaged, id)
	ss.mu.Unlock()
}

func (ss *shardSet) damagedReplicas() map[uint32]*raftstore.DamageError {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return maps.Clone(ss.damaged)
}

func (ss *shardSet) damagedIDs() []uint32 {
	return slices.Sorted(maps.Keys(ss.damagedReplicas()))
}

// damagedWhileRunning stops a replica that found damaged bytes: it is shut
// down (from its own goroutine: raft calls this from its own) and not
// opened again until repaired.
func (ss *shardSet) damagedWhileRunning(id uint32, d *raftstore.DamageError) {
	ss.setDamaged(id, d)
	go func() {
		ss.mu.Lock()
		s := ss.local[id]
		delete(ss.local, id)
		ss.mu.Unlock()
		if s == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ss.n.ctx), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			ss.n.logger.Warn("shutting down a damaged shard replica", "shard", id, "err", err)
		}
	}()
}

func (ss *shardSet) open(id uint32, m meta.ShardMap) (*shard.Shard, error) {
	var boot []raft.Server
	// A replica placed at bootstrap bootstraps the group from the map; one
	// added by a move (a learner, or any replica once the shard's replicas
	// changed) starts empty and is added by the group's leader, which
	// holds the configuration in its log.
	bootstrap := m.Changes[id] == 0 && slices.Contains(m.Replicas[id], ss.n.cfg.NodeID)
	for _, node := range m.Replicas[id] {
		if !bootstrap {
			break
		}
		addr := m.RaftAddrs[node]
		if addr == "" {
			return nil, fmt.Errorf("no raft address for replica %s", node)
		}
		boot = append(boot, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(node), Address: raft.ServerAddress(addr)})
	}
	// Identical on every replica (the map is replicated), as raft needs for
	// a multi-node bootstrap; Open ignores it when the shard has state.
	slices.SortFunc(boot, func(a, b raft.Server) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	var seed *raftgroup.Seed
	if bootstrap && ss.n.cfg.Restore != nil {
		// Every replica placed at bootstrap seeds the same piece, so the
		// group starts identical everywhere (raftgroup.Seed).
		if seed = ss.n.cfg.Restore.ShardSeed(id); seed == nil {
			return nil, fmt.Errorf("the backup has no piece of shard %d", id)
		}
	}
	gate := &raftmux.Gate{}
	// Held from the start while the clock check holds this node; the
	// state it has once the shard is listed is applied in openAssigned.
	ss.n.clock.applyMu.Lock()
	ss.n.clock.holdGate(gate)
	ss.n.clock.applyMu.Unlock()
	tr, err := ss.n.mux.Transport(shard.GroupName(id), raftmux.TransportOptions{Gate: gate})
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	s, err := shard.Open(shard.Config{
		ID:             id,
		NodeID:         ss.n.cfg.NodeID,
		Dir:            filepath.Join(ss.n.cfg.DataDir, "shards", strconv.FormatUint(uint64(id), 10)),
		Transport:      tr,
		Bootstrap:      boot,
		Seed:           seed,
		Now:            ss.n.cfg.Now,
		Logger:         ss.n.logger,
		Raft:           ss.n.shardTuning(),
		Gate:           gate,
		MaxClockOffset: ss.n.cfg.MaxClockOffset,
		Node:           ss.n.ident,
		Damaged:        func(d *raftstore.DamageError) { ss.damagedWhileRunning(id, d) },
		Disk:           ss.n.cfg.Disk,
		AdmitSend:      ss.n.admitSend,
		NodeFormat:     ss.n.meta.NodeFormat,
	})
	if err != nil {
		if c, ok := tr.(interface{ Close() error }); ok {
			_ = c.Close()
		}
		return nil, err
	}
	return s, nil
}

func (ss *shardSet) get(id uint32) *shard.Shard {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return ss.local[id]
}

func (ss *shardSet) all() []*shard.Shard {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	ids := slices.Sorted(maps.Keys(ss.local))
	out := make([]*shard.Shard, len(ids))
	for i, id := range ids {
		out[i] = ss.local[id]
	}
	return out
}

// closeAll stops every open replica and its loops, keeping its directory.
func (ss *shardSet) closeAll(ctx context.Context) error {
	ss.mu.Lock()
	stops := ss.stops
	ss.stops = map[uint32]context.CancelFunc{}
	ss.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return ss.shutdownAll(sctx)
}

func (ss *shardSet) shutdownAll(ctx context.Context) error {
	ss.mu.Lock()
	local := ss.local
	ss.local = map[uint32]*shard.Shard{}
	ss.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for id, s := range local {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("shard %d: %w", id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ShardCount is the number of data shards (0 until the map is known).
func (n *Node) ShardCount() uint32 {
	if c := n.shards.count.Load(); c > 0 {
		return c
	}
	return n.meta.ShardMap().Count
}

// ShardMap is the placed shard map from the local meta replica.
func (n *Node) ShardMap() meta.ShardMap { return n.meta.ShardMap() }

// ShardReplicas lists a shard's replica node ids, preferred leader first.
func (n *Node) ShardReplicas(id uint32) []string {
	if n.shards.count.Load() > 0 {
		n.shards.mu.RLock()
		defer n.shards.mu.RUnlock()
		return slices.Clone(n.shards.placed.Replicas[id])
	}
	return slices.Clone(n.meta.ShardMap().Replicas[id])
}

// LocalShard returns the local replica of a shard, or nil.
func (n *Node) LocalShard(id uint32) *shard.Shard { return n.shards.get(id) }

// LocalShards returns the local replicas, by shard id.
func (n *Node) LocalShards() []*shard.Shard { return n.shards.all() }

// ShardLeader says who leads a shard: the local replica's raft view if it is
// hosted here, else the last hint the router recorded. ok is false when no
// leader is known (an election is running, or no hint yet): the router then
// asks the replicas in turn.
func (n *Node) ShardLeader(id uint32) (nodeID, grpcAddr string, ok bool) {
	if s := n.shards.get(id); s != nil {
		leader, _ := s.Leader()
		nodeID = string(leader)
		if nodeID == n.cfg.NodeID && s.Sidelined() {
			// raft still names this replica, but it will not serve (its
			// disk stalled, say): let the router ask the other replicas.
			return "", "", false
		}
	} else {
		n.shards.mu.RLock()
		nodeID = n.shards.hints[id]
		n.shards.mu.RUnlock()
	}
	if nodeID == "" {
		return "", "", false
	}
	grpcAddr, _ = n.MemberGRPC(nodeID)
	return nodeID, grpcAddr, true
}

// NoteLeader records a not-leader hint for a shard not hosted here.
func (n *Node) NoteLeader(id uint32, nodeID string) {
	if nodeID == "" {
		return
	}
	n.shards.mu.Lock()
	n.shards.hints[id] = nodeID
	n.shards.mu.Unlock()
}
