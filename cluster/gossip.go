package cluster

import (
	"context"
	"fmt"
	"log"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/clockskew"
	"github.com/raftq/raftq/meta/metapb"
)

// Member is one node as gossip knows it.
type Member struct {
	NodeID     string
	GRPCAddr   string
	PeerAddr   string
	RaftAddr   string
	GossipAddr string
	// State is "alive", "suspect", "dead" or "left".
	State string
	// Version is the binary version the node advertises.
	Version string
}

type member struct {
	Member
	meta       *metapb.NodeMeta
	aliveSince time.Time // zero unless alive
}

// gossip owns memberlist and the member table built from its events.
type gossip struct {
	n        *Node
	ml       *memberlist.Memberlist
	selfAddr string              // advertised gossip address; LocalNode() is not safe to read later
	hasState atomic.Bool         // announced in NodeMeta
	keyring  *memberlist.Keyring // memberlist's own; nil: clear gossip

	mu      sync.RWMutex
	members map[string]*member

	events chan struct{} // coalesced: membership changed
}

func newGossipConfig(cfg Config, d *gossipDelegate) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeID
	mc.Label = cfg.ClusterName
	host, port, err := splitHostPort(cfg.GossipBind)
	if err != nil {
		return nil, fmt.Errorf("gossip bind: %w", err)
	}
	mc.BindAddr, mc.BindPort = host, port
	if cfg.GossipAdvertise != "" {
		host, port, err := splitHostPort(cfg.GossipAdvertise)
		if err != nil {
			return nil, fmt.Errorf("gossip advertise: %w", err)
		}
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	// Faster failure detection than the LAN defaults; still sane on a LAN
	// and quick enough for loopback tests. Liveness only feeds hints and the
	// nonvoter grace: raft decides leadership on its own.
	mc.ProbeInterval = 500 * time.Millisecond
	mc.ProbeTimeout = 400 * time.Millisecond
	mc.GossipInterval = 100 * time.Millisecond
	mc.PushPullInterval = 10 * time.Second
	mc.TCPTimeout = 2 * time.Second
	mc.SuspicionMult = suspicionMult
	// A node restarted on a new address (a container with a new IP) may
	// take its name back this long after its old entry was declared dead.
	mc.DeadNodeReclaimTime = 2 * time.Second
	if mc.Keyring, err = gossipKeyring(cfg.GossipKeys); err != nil {
		return nil, err
	}
	// memberlist checks both directions by default once a keyring is set;
	// stated here because a member that took clear messages could be fed a
	// forged member table.
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Delegate = d
	mc.Events = d
	// Probe acks carry the responder's clock: the clock check's samples.
	mc.Ping = d
	mc.Logger = log.New(logBridge{logger: cfg.Logger.With("component", "memberlist")}, "", 0)
	return mc, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

func (g *gossip) localMeta() *metapb.NodeMeta {
	cfg := g.n.cfg
	return &metapb.NodeMeta{
		NodeId:          cfg.NodeID,
		GrpcAddr:        cfg.GRPCAddr,
		PeerAddr:        cfg.PeerAddr,
		RaftAddr:        g.n.mux.Addr(),
		Version:         cfg.Version,
		BootstrapExpect: uint32(cfg.BootstrapExpect),
		HasState:        g.hasState.Load(),
		ClockHold:       g.n.clock.holds(),
		LogFormat:       cfg.logFormat,
		Restore:         restoreID(cfg.Restore),
	}
}

// announce republishes this node's metadata (after a clock check change).
// A node told to stop while it waits for the broadcast is no fault: its
// members learn of it leaving instead, so that is said at Info, not Warn
// (a calm stop logs no warning; internal/quickstart checks it).
func (g *gossip) announce() {
	err := g.ml.UpdateNode(5 * time.Second)
	switch {
	case err == nil:
	case g.n.ctx.Err() != nil:
		g.n.logger.Info("gossip: metadata not announced before stopping", "err", err)
	default:
		g.n.logger.Warn("gossip: announce metadata", "err", err)
	}
}

// mayLead reports whether nodeID is alive and its clock check lets it lead
// (as it last announced).
func (g *gossip) mayLead(nodeID string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	m, ok := g.members[nodeID]
	return ok && m.State == "alive" && !m.meta.GetClockHold()
}

// announceState publishes has_state once the meta group has state, so a
// node that lost its disk never bootstraps a second cluster beside it.
func (g *gossip) announceState() {
	if g.hasState.Swap(true) {
		return
	}
	if err := g.ml.UpdateNode(5 * time.Second); err != nil {
		g.n.logger.Warn("gossip: announce meta state", "err", err)
	}
}

func (g *gossip) notify() {
	select {
	case g.events <- struct{}{}:
	default:
	}
}

func (g *gossip) upsert(node *memberlist.Node, state string) {
	var m metapb.NodeMeta
	if err := proto.Unmarshal(node.Meta, &m); err != nil || m.GetNodeId() == "" {
		g.n.logger.Warn("gossip: member without raftq metadata", "name", node.Name, "addr", node.Address())
		return
	}
	g.mu.Lock()
	prev := g.members[m.GetNodeId()]
	cur := &member{
		Member: Member{
			NodeID:     m.GetNodeId(),
			GRPCAddr:   m.GetGrpcAddr(),
			PeerAddr:   m.GetPeerAddr(),
			RaftAddr:   m.GetRaftAddr(),
			GossipAddr: node.Address(),
			State:      state,
			Version:    m.GetVersion(),
		},
		meta: &m,
	}
	if state == "alive" {
		cur.aliveSince = time.Now()
		if prev != nil && prev.State == "alive" {
			cur.aliveSince = prev.aliveSince
		}
	}
	g.members[m.GetNodeId()] = cur
	g.mu.Unlock()
	g.notify()
}

func (g *gossip) markGone(node *memberlist.Node) {
	state := "dead"
	if node.State == memberlist.StateLeft {
		state = "left"
	}
	g.mu.Lock()
	for _, m := range g.members {
		if m.NodeID == node.Name {
			m.State = state
			m.aliveSince = time.Time{}
		}
	}
	g.mu.Unlock()
	g.n.clock.est.Forget(node.Name)
	g.notify()
}

// refreshStates folds memberlist's suspect view into the table; events only
// report join, leave and meta updates.
func (g *gossip) refreshStates() {
	suspect := map[string]bool{}
	for _, node := range g.ml.Members() {
		if node.State == memberlist.StateSuspect {
			suspect[node.Name] = true
		}
	}
	g.mu.Lock()
	for _, m := range g.members {
		switch {
		case suspect[m.NodeID] && m.State == "alive":
			m.State = "suspect"
		case !suspect[m.NodeID] && m.State == "suspect":
			m.State = "alive"
		}
	}
	g.mu.Unlock()
}

func (g *gossip) list() []Member {
	g.refreshStates()
	g.mu.RLock()
	out := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, m.Member)
	}
	g.mu.RUnlock()
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.NodeID < b.NodeID:
			return -1
		case a.NodeID > b.NodeID:
			return 1
		}
		return 0
	})
	return out
}

// alive returns the alive members with their metadata and alive-since time.
func (g *gossip) alive() []member {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []member
	for _, m := range g.members {
		if m.State == "alive" {
			out = append(out, *m)
		}
	}
	return out
}

func (g *gossip) get(nodeID string) (Member, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	m, ok := g.members[nodeID]
	if !ok {
		return Member{}, false
	}
	return m.Member, true
}

// joinLoop retries the seeds with bounded backoff until one answers, then
// keeps reconnecting to members declared dead.
func (g *gossip) joinLoop(ctx context.Context, seeds []string) {
	self := g.selfAddr
	var others []string
	for _, s := range seeds {
		if s != "" && s != self {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		g.n.clock.joined.Store(true)
		g.reconnectLoop(ctx)
		return
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		n, err := g.ml.Join(others)
		if n > 0 {
			g.n.clock.joined.Store(true)
			g.n.logger.Info("gossip: joined", "contacted", n, "attempt", attempt)
			g.reconnectLoop(ctx)
			return
		}
		g.n.logger.Debug("gossip: join failed, retrying", "seeds", others, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// gossipDelegate adapts memberlist callbacks to gossip. Its methods run on
// memberlist goroutines and must be quick.
type gossipDelegate struct{ g *gossip }

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	b, err := proto.Marshal(d.g.localMeta())
	if err != nil || len(b) > limit {
		// Start checks the size, so this is unreachable in practice; an
		// empty meta marks the node unusable rather than crashing gossip.
		return nil
	}
	return b
}

func (d *gossipDelegate) NotifyMsg([]byte)                           {}
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

// AckPayload puts this node's clock into its probe acks.
func (d *gossipDelegate) AckPayload() []byte { return clockskew.EncodeClock(d.g.n.clock.now()) }

// NotifyPingComplete feeds a direct probe's ack to the clock check.
func (d *gossipDelegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	d.g.n.clock.observe(other.Name, payload, rtt)
}

func (d *gossipDelegate) NotifyJoin(n *memberlist.Node)   { d.g.upsert(n, "alive") }
func (d *gossipDelegate) NotifyUpdate(n *memberlist.Node) { d.g.upsert(n, "alive") }
func (d *gossipDelegate) NotifyLeave(n *memberlist.Node)  { d.g.markGone(n) }

// aliveFor reports whether nodeID has been alive for at least d.
func (g *gossip) aliveFor(nodeID string, d time.Duration) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	m, ok := g.members[nodeID]
	return ok && m.State == "alive" && time.Since(m.aliveSince) >= d
}

// Failure detection (newGossip): a dead member is suspected after a probe
// and declared dead after the suspicion timeout, SuspicionMult × log10 of
// the members (at least 1) × ProbeInterval: 2 s on up to 10 nodes, 4 s on
// up to 100. gossipDeadAfter bounds that for the clusters raftq runs.
const (
	suspicionMult   = 4
	gossipDeadAfter = 5 * time.Second
)
