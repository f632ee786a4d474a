// Package cluster is the control plane of a raftq node: memberlist
// discovery, the meta raft group (via package meta), bootstrap, nonvoter
// admission, shard placement, hosting the data shards a node is assigned,
// and reconciling queue policies from meta into every shard.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/clockskew"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
	"github.com/raftq/raftq/tlsconf"
)

// metaGroup is the raftmux group id of the meta raft group.
const metaGroup = "meta"

// Node is one running raftq node.
type Node struct {
	cfg    Config
	logger *slog.Logger

	mux      *raftmux.Mux
	proofs   proofs // recent failed identity proofs (prove.go)
	meta     *meta.Store
	metaGate *raftmux.Gate // the meta transport's, held by the clock check
	gossip   *gossip
	disk     *diskGuard
	mem      *memGuard
	quiet    *raftgroup.Quiescer // quiets the idle shards (shardTuning)

	ctx    context.Context // background loops; cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup

	ready     chan struct{}
	readyOnce sync.Once

	shards  *shardSet
	clock   *clockGuard
	leaders *leaderCounts

	// ident is the node's identity (node.json); verified is closed once
	// it is settled (identity.go), until then raft traffic is isolated.
	ident        *raftstore.Node
	verified     chan struct{}
	verifiedOnce sync.Once
	// formedNew: this node verified itself as an initial voter of a new
	// cluster (identity.go); it bootstraps with the others (bootstrap.go).
	formedNew atomic.Bool
	fatalOnce sync.Once
	digests   digestCounters
	repairMu  sync.Mutex // serializes Repair
	// refusedRetired: a retired node came back and was refused (logged once).
	refusedRetired atomic.Bool
	// dead: the meta leader's clocks of members not alive (deadnodes.go).
	dead *deadNodes
	// retired: this node's id was retired; it stays out (retired.go).
	retired atomic.Bool
	balance rebalancer // the meta leader's rebalancing (rebalance.go)
	reshard resharder  // the meta leader's slot moves (reshard.go)
	caller  atomic.Pointer[shardCallerBox]

	shutdownOnce sync.Once
	shutdownErr  error
}

// Start opens the raftmux listener, the meta group and gossip, and returns;
// joining, bootstrap, placement and opening shards continue in the
// background (Ready reports when this node serves its shards).
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger.With("node", cfg.NodeID)
	cfg.Logger = logger
	ident, err := raftstore.OpenNode(cfg.DataDir, cfg.NodeID)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// The data directory holds message bodies: owner only, whatever an
	// older raftq or a hand-made copy left (docs/operations.md).
	if changed, err := raftstore.Private(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	} else if changed > 0 {
		logger.Warn("took group and other access off the data directory", "dir", cfg.DataDir, "entries", changed)
	}
	if ident.Fresh() {
		if err := ident.Create(cfg.NodeID); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	n := &Node{cfg: cfg, logger: logger, ready: make(chan struct{}), ident: ident, verified: make(chan struct{}), dead: newDeadNodes(),
		quiet: raftgroup.NewQuiescer(0, logger)}
	n.ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	n.shards = newShardSet(n)
	n.clock = newClockGuard(n)
	n.leaders = &leaderCounts{}
	n.disk = newDiskGuard(cfg.NodeID, cfg.DataDir, cfg.DiskReserve, logger)
	n.disk.check()
	n.mem = newMemGuard(cfg.NodeID, cfg.MemoryBudget, logger)
	ok := false
	defer func() {
		if !ok {
			n.cancel()
			n.closeAll()
		}
	}()

	var raftTLS *raftmux.TLS
	if cfg.TLS != nil {
		raftTLS = &raftmux.TLS{Server: cfg.TLS.Members(tlsconf.ALPNRaft),
			Dial: func(expect string) *tls.Config { return cfg.TLS.Dialer(tlsconf.ALPNRaft, expect) }}
	}
	n.mux, err = raftmux.ListenWith(cfg.RaftBind, cfg.RaftAdvertise, raftmux.Options{TLS: raftTLS, Logger: logger,
		MaxConns: cfg.RaftMaxConns, IdleTimeout: cfg.RaftIdleTimeout})
	if err != nil {
		return nil, fmt.Errorf("cluster: raft listener: %w", err)
	}
	if !ident.Verified() {
		n.mux.SetIsolated(true)
	}
	if err := n.openMeta(); err != nil {
		return nil, err
	}
	if cfg.Restore != nil && n.meta.HasState() {
		// A voter restarted while the restore is under way must keep
		// seeding the shards it has yet to create, so this is no refusal;
		// on a cluster that formed long ago it changes nothing (the map is
		// placed, every replica exists).
		logger.Warn("--restore on a node with meta state: only groups not created yet start from the backup; remove --restore once the restored cluster serves",
			"dir", cfg.DataDir)
	}
	if ident.Verified() {
		n.verifiedOnce.Do(func() { close(n.verified) })
	}
	n.leaders.watch(metaGroup, n.meta.Raft(), cfg.NodeID)

	n.gossip = &gossip{n: n, members: map[string]*member{}, events: make(chan struct{}, 1)}
	n.gossip.hasState.Store(n.meta.HasState())
	if b, err := proto.Marshal(n.gossip.localMeta()); err != nil || len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("cluster: gossip metadata of %d bytes exceeds %d (err %v)", len(b), memberlist.MetaMaxSize, err)
	}
	mc, err := newGossipConfig(cfg, &gossipDelegate{g: n.gossip})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.gossip.keyring = mc.Keyring
	if n.gossip.ml, err = memberlist.Create(mc); err != nil {
		return nil, fmt.Errorf("cluster: gossip: %w", err)
	}
	// memberlist reports the local node through NotifyJoin too, but only
	// once it is created; record it now so the table is never empty.
	n.gossip.selfAddr = n.gossip.ml.LocalNode().Address()
	n.gossip.upsert(n.gossip.ml.LocalNode(), "alive")

	n.goLoop(func(ctx context.Context) { n.gossip.joinLoop(ctx, cfg.Join) })
	if !ident.Verified() {
		n.goLoop(n.verifyLoop)
	}
	n.goLoop(n.rejoinLoop)
	n.goLoop(n.digestLoop)
	if cfg.Repair {
		n.goLoop(n.repairAtStart)
	}
	if cfg.BootstrapExpect > 0 {
		n.goLoop(n.bootstrapLoop)
	}
	n.goLoop(n.clock.loop)
	n.goLoop(n.metaDutiesLoop)
	n.goLoop(n.cronLoop)
	n.goLoop(n.moveLoop)
	n.goLoop(n.retiredLoop)
	n.goLoop(n.shards.manageLoop)
	n.goLoop(n.disk.loop)
	n.goLoop(n.mem.loop)
	logger.Info("node started", "raft", n.mux.Addr(), "gossip", n.gossip.selfAddr,
		"grpc", cfg.GRPCAddr, "peer", cfg.PeerAddr, "bootstrap_expect", cfg.BootstrapExpect, "has_state", n.meta.HasState(), "verified", ident.Verified(),
		"log_format", cfg.logFormat)
	ok = true
	return n, nil
}

func (n *Node) goLoop(f func(context.Context)) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f(n.ctx)
	}()
}

// NodeID is this node's id.
func (n *Node) NodeID() string { return n.cfg.NodeID }

// Ready is closed once the shard map is known and this node's shards are
// open.
func (n *Node) Ready() <-chan struct{} { return n.ready }

func (n *Node) markReady() { n.readyOnce.Do(func() { close(n.ready) }) }

// Meta is the node's meta store.
func (n *Node) Meta() *meta.Store { return n.meta }

// RaftAddr is the advertised raftmux address.
func (n *Node) RaftAddr() string { return n.mux.Addr() }

// RaftConns counts the node's inbound raft connections (metrics).
func (n *Node) RaftConns() raftmux.ConnStats { return n.mux.ConnStats() }

// GossipAddr is the advertised memberlist address.
func (n *Node) GossipAddr() string { return n.gossip.selfAddr }

// Members lists every node gossip has seen, sorted by id.
func (n *Node) Members() []Member { return n.gossip.list() }

// MemberPeer returns a member's advertised peer address.
func (n *Node) MemberPeer(nodeID string) (string, bool) {
	m, ok := n.gossip.get(nodeID)
	if !ok || m.PeerAddr == "" {
		return "", false
	}
	return m.PeerAddr, true
}

// MemberGRPC returns a member's advertised gRPC address.
func (n *Node) MemberGRPC(nodeID string) (string, bool) {
	m, ok := n.gossip.get(nodeID)
	if !ok || m.GRPCAddr == "" {
		return "", false
	}
	return m.GRPCAddr, true
}

// ClockStatus is the clock check's latest verdict (docs/clock.md).
func (n *Node) ClockStatus() clockskew.Status { return n.clock.Status() }

// LeaderElections counts, per raft group ("meta", "shard-N"), how often
// this node became its leader since it started.
func (n *Node) LeaderElections() map[string]uint64 { return n.leaders.snapshot() }

// Shutdown hands off leadership of every group this node leads (bounded by
// ctx), shuts the shards and meta down, leaves gossip and closes listeners.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() {
		// Stop the loops first, so nothing proposes or reopens shards
		// while leadership moves away.
		n.cancel()
		n.wg.Wait()
		n.transferLeadership(ctx)
		n.shutdownErr = n.closeAll()
		if n.shutdownErr != nil {
			n.logger.Warn("node stopped with errors", "err", n.shutdownErr)
		}
	})
	return n.shutdownErr
}

// transferLeadership moves every led group away in parallel; failures only
// cost an election timeout, so they are logged, not returned.
func (n *Node) transferLeadership(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range n.shards.all() {
		if !s.IsLeader() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := raftgroup.WaitFuture(ctx, s.Raft().LeadershipTransfer(), nil); err != nil {
				// Its peers elect a leader after a timeout instead: a pause,
				// not a fault (they are often stopping too).
				n.logger.Info("shard leadership not handed off before stopping; the other replicas elect a leader", "shard", s.ID(), "err", err)
			}
		}()
	}
	if n.meta != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.meta.TransferLeadership(ctx); err != nil {
				n.logger.Info("meta leadership not handed off before stopping; the other replicas elect a leader", "err", err)
			}
		}()
	}
	wg.Wait()
}

// closeAll releases whatever Start opened; shutdown of raft groups is not
// bounded by the caller's ctx being done (transfer already used it), so it
// gets its own context.
func (n *Node) closeAll() error {
	ctx := context.WithoutCancel(n.ctx)
	var errs []error
	if n.shards != nil {
		errs = append(errs, n.shards.shutdownAll(ctx))
	}
	if n.meta != nil {
		errs = append(errs, n.meta.Shutdown(ctx))
	}
	if n.gossip != nil && n.gossip.ml != nil {
		if err := n.gossip.ml.Leave(time.Second); err != nil {
			// No member confirmed the leave (they may be stopping too):
			// they notice the node is gone by its silence instead.
			n.logger.Info("gossip: leave not confirmed by a member; they will notice the node is gone", "err", err)
		}
		errs = append(errs, n.gossip.ml.Shutdown())
	}
	if n.mux != nil {
		errs = append(errs, n.mux.Close())
	}
	n.cfg.Peers.Close()
	return errors.Join(errs...)
}

// openMeta opens the meta replica. A damaged one stops the start unless
// the node may repair it: then it is moved aside and re-created empty, and
// the node must be verified again (identity.go), which removes it from
// the meta group before it takes part.
func (n *Node) openMeta() error {
	// The meta group starts held by the clock check (Unchecked) like
	// every shard, so it cannot win an election before the clock is known.
	n.metaGate = &raftmux.Gate{}
	n.clock.holdGate(n.metaGate)
	tr, err := n.mux.Transport(metaGroup, raftmux.TransportOptions{Gate: n.metaGate})
	if err != nil {
		return fmt.Errorf("cluster: meta transport: %w", err)
	}
	dir := filepath.Join(n.cfg.DataDir, "meta")
	open := func() (*meta.Store, error) {
		return meta.Open(meta.Config{
			NodeID:    n.cfg.NodeID,
			Dir:       dir,
			Transport: tr,
			Gate:      n.metaGate,
			Now:       n.cfg.Now,
			Logger:    n.logger,
			Tuning:    n.cfg.Raft,
			Disk:      n.cfg.Disk,
			Node:      n.ident,
			Damaged:   n.metaDamaged,
		})
	}
	n.meta, err = open()
	d, damaged := raftstore.IsDamage(err)
	if damaged && n.cfg.Repair {
		n.logger.Warn("meta replica damaged; repairing: moving it aside, re-creating it empty, and removing it from the meta group before it takes part",
			"reason", d.Reason, "detail", d.Detail)
		if _, err := raftstore.Discard(dir); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if err := n.ident.Rejoin(metaGroup, "", false); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if err := n.ident.SetVerified(false); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		n.mux.SetIsolated(true)
		n.meta, err = open()
	} else if damaged {
		// `raftq cluster repair` cannot reach a node that does not run.
		err = fmt.Errorf("the node cannot run without its meta replica: start it with --repair: %w", err)
	}
	if err != nil {
		if c, ok := tr.(raft.WithClose); ok {
			_ = c.Close()
		}
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// metaDamaged stops the node: it cannot run without its meta replica.
func (n *Node) metaDamaged(d *raftstore.DamageError) {
	n.fatal(fmt.Errorf("the meta replica found damaged bytes while running; restart the node with --repair: %w", d))
}

// fatal reports, once, that the node must stop.
func (n *Node) fatal(err error) {
	n.fatalOnce.Do(func() { n.cfg.Fatal(err) })
}

// repairAtStart repairs damaged shard replicas once the node is ready
// (--repair), and tries again every rejoinEvery until none is left: a
// repair needs the group's leader, and a node restarted right after it
// stopped may have led the group itself, so the others are still
// electing one.
func (n *Node) repairAtStart(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-n.ready:
	}
	tick := time.NewTicker(rejoinEvery)
	defer tick.Stop()
	for {
		for _, r := range n.Repair(ctx) {
			n.logger.Info("repair", "group", r.GetGroup(), "reason", r.GetReason(), "outcome", r.GetOutcome())
		}
		if len(n.shards.damagedReplicas()) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Verified reports whether the node's identity is settled: until then it
// takes no part in raft (identity.go).
func (n *Node) Verified() bool { return isDone(n.verified) }

// Damaged lists this node's damaged replicas.
func (n *Node) Damaged() map[string]*raftstore.DamageError {
	out := map[string]*raftstore.DamageError{}
	for id, d := range n.shards.damagedReplicas() {
		out[shardGroup(id)] = d
	}
	return out
}
