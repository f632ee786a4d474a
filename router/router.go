// Package router maps queue operations to data shards and carries them to
// the shard's leader: it proposes locally when this node leads the shard and
// forwards over the peer protocol (package peer) otherwise, following
// not-leader hints. It owns long polling: shards offer Claim and Wait.
package router

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/internal/liveness"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// Topology is what the router needs to know about the cluster. cluster.Node
// implements it.
type Topology interface {
	NodeID() string
	ShardCount() uint32
	// SlotTable places keyed messages on shards: the current shard map's
	// table (meta.ShardMap.Table), which follows slot moves. Zero Slots
	// while no map is known.
	SlotTable() wire.SlotTable
	LocalShard(id uint32) *shard.Shard
	ShardReplicas(id uint32) []string
	// ShardLeader is the best knowledge of a shard's leader: the local raft
	// view for hosted shards, else the last hint recorded.
	ShardLeader(id uint32) (nodeID, grpcAddr string, ok bool)
	NoteLeader(id uint32, nodeID string)
	// MemberGRPC is a member's client address, for leader hints to
	// clients; MemberPeer its peer address, where forwards go.
	MemberGRPC(nodeID string) (string, bool)
	MemberPeer(nodeID string) (string, bool)
	// DedupPeers are the shards a keyed send of queue to slot asks for its
	// dedup key before it goes to the slot's owner: those the slot moved
	// away from less than the queue's dedup window ago, latest first
	// (meta.ShardMap.DedupPeers).
	DedupPeers(queue string, slot uint32) []PriorOwner
}

// Options tune forwarding.
type Options struct {
	// LeaderWait bounds how long one call waits for a shard to elect a
	// leader before answering Unavailable. Default 5 s (above the raft
	// election timeout, below client deadlines).
	LeaderWait time.Duration
	Logger     *slog.Logger
	// ObservePropose, if set, receives the latency of every proposal this
	// node makes as a shard leader (hand-off to raft until applied).
	ObservePropose func(shard uint32, d time.Duration)
	// Parked, if set, is told +1 when a receive of this node's clients
	// parks in its long poll (a sweep found nothing) and -1 when the wait
	// ends.
	Parked func(delta int)
	// MaxParked caps the long polls parked on this node at once (0: no
	// cap): each holds a goroutine, a timer and a connection's stream, so
	// without a cap idle consumers alone could exhaust a node. A receive
	// past the cap is refused at once (*ParkedFullError); nothing is
	// leased by it. A tenant that parks some may hold an equal share
	// with one more tenant (half the cap when it is alone), so another
	// tenant's consumers always find room.
	MaxParked int
	// PeerProbe times the liveness checks on forwarded calls
	// (internal/liveness): a forward out for After with nothing heard
	// from its node in as long gets the node probed, and a probe
	// unanswered for Timeout ends the call and every other call out to
	// that node. Default peer.DefaultProbeAfter and
	// peer.DefaultProbeTimeout.
	PeerProbe liveness.Config
	// PeerCreds secure the connections to other nodes (mutual TLS between
	// members); nil dials in plaintext.
	PeerCreds credentials.TransportCredentials
}

// Router is safe for concurrent use.
type Router struct {
	topo  Topology
	peers *peer.Client
	opts  Options
	log   *slog.Logger
	next  atomic.Uint32 // rotation for balanced shard choice
	// parked counts the long polls parked now (MaxParked), by tenant.
	parked parkedCount
}

// New returns a router over topo.
func New(topo Topology, opts Options) *Router {
	if opts.LeaderWait <= 0 {
		opts.LeaderWait = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Router{topo: topo, peers: peer.NewClient(opts.PeerProbe, opts.PeerCreds), opts: opts, log: opts.Logger}
}

// Close releases forwarding connections.
func (r *Router) Close() error { return r.peers.Close() }

// Conn returns the shared client connection to an address, for calls that
// are not shard calls: control-plane writes passed to the meta leader's
// client port.
func (r *Router) Conn(addr string) (*grpc.ClientConn, error) { return r.peers.Conn(addr) }

// Peers is the router's peer client, for node-to-node calls that are not
// shard calls (repair).
func (r *Router) Peers() *peer.Client { return r.peers }

// ShardCount is the fixed number of data shards, 0 while the shard map is
// not loaded (see Ready).
func (r *Router) ShardCount() uint32 { return r.topo.ShardCount() }

// ShardForSend chooses the shard for a new message. Grouped and
// dedup-keyed messages go to the shard owning their slot in the current
// slot table (Topology.SlotTable); the rest go to a shard this node leads
// when there is one, so a send costs no extra hop, rotating for balance;
// else to any shard in rotation. It fails with a *NotReadyError while the
// shard map is not loaded. Send routes the same way, and follows a slot
// that moves while the message is on its way.
func (r *Router) ShardForSend(queue, group, dedupKey string) (uint32, error) {
	table, n, err := r.placement()
	if err != nil {
		return 0, err
	}
	s, keyed, err := r.shardOf(table, n, queue, &fsmpb.NewMessage{GroupId: group, DedupKey: dedupKey})
	switch {
	case err != nil:
		return 0, err
	case keyed:
		return s, nil
	}
	return r.freeShard(n), nil
}

// freeShard is a shard for a message any shard may take: one this node
// leads when there is one, rotating; else the next in rotation. n > 0.
func (r *Router) freeShard(n uint32) uint32 {
	start := r.next.Add(1)
	for i := uint32(0); i < n; i++ {
		id := (start + i) % n
		if sh := r.topo.LocalShard(id); sh != nil && sh.IsLeader() {
			return id
		}
	}
	return start % n
}

// rotation returns shard ids starting at a rotating offset, so concurrent
// receivers spread over shards instead of all draining shard 0 first. On
// three calls in four the shards this node leads come first: leasing from
// them costs no forwarding hop, and clients spread receives over nodes.
// The fourth keeps plain rotation, so shards led by nodes that no consumer
// talks to are still drained, at no less than a quarter of the calls.
// With no shard map (n == 0) it is empty; callers check Ready first.
func (r *Router) rotation() []uint32 {
	n := r.topo.ShardCount()
	start := r.next.Add(1)
	ids := make([]uint32, 0, n)
	if start%4 == 0 {
		// start/4, not start: start is a multiple of 4 here, which with a
		// shard count divisible by 4 would always begin at shard 0.
		for i := range n {
			ids = append(ids, (start/4+i)%n)
		}
		return ids
	}
	// The other three calls in four count from start - start/4, which runs
	// through every integer: from start itself they would never begin at
	// a shard whose id is a multiple of 4 when n is.
	off := start - start/4
	var remote []uint32
	for i := range n {
		id := (off + i) % n
		if sh := r.topo.LocalShard(id); sh != nil && sh.IsLeader() {
			ids = append(ids, id)
		} else {
			remote = append(remote, id)
		}
	}
	return append(ids, remote...)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
