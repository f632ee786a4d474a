package raftmux

import (
	"errors"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// ErrGated is what a gated raft RPC fails with: the replica holds back this
// traffic on purpose (see Gate).
var ErrGated = errors.New("raftmux: raft traffic held back by this replica")

// Hold is what a Gate holds back.
type Hold int

const (
	// HoldCampaign drops this replica's outgoing vote and pre-vote
	// requests and refuses incoming TimeoutNow (a leadership transfer to
	// it), so it can never become leader; it still replicates and votes
	// for others. A replica that must not lead (its clock is off) holds
	// this. With pre-vote on, a campaign that gets no answers does not
	// raise the term, so holding it disturbs nobody.
	HoldCampaign Hold = iota + 1
	// HoldAll drops every outgoing RPC: heartbeats, appends, votes,
	// snapshots, TimeoutNow. A leader whose own log writes have stalled
	// holds this so its followers stop hearing from it and elect a leader
	// that can write, although its raft loop is stuck and cannot step
	// down on its own.
	HoldAll
)

func (h Hold) String() string {
	switch h {
	case HoldCampaign:
		return "campaign"
	case HoldAll:
		return "all"
	}
	return "unknown"
}

// Gate holds back parts of one replica's raft traffic. Several reasons may
// hold at once; traffic flows again when the last reason is released. The
// zero Gate holds nothing. Safe for concurrent use.
type Gate struct {
	mu      sync.Mutex
	reasons map[string]Hold
	// campaign and all are the union of reasons, read on every RPC.
	campaign, all atomic.Bool
}

// Hold starts holding back h for reason (a short label shown in logs and
// metrics); holding the same reason again replaces its kind.
func (g *Gate) Hold(reason string, h Hold) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reasons == nil {
		g.reasons = map[string]Hold{}
	}
	g.reasons[reason] = h
	g.refresh()
}

// Release stops holding for reason; releasing a reason not held is a no-op.
func (g *Gate) Release(reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.reasons, reason)
	g.refresh()
}

// Reasons lists the reasons held, sorted.
func (g *Gate) Reasons() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.reasons))
}

// Holding reports whether h (or a stronger hold) is in force.
func (g *Gate) Holding(h Hold) bool {
	if g.all.Load() {
		return true
	}
	return h == HoldCampaign && g.campaign.Load()
}

func (g *Gate) refresh() {
	var campaign, all bool
	for _, h := range g.reasons {
		switch h {
		case HoldCampaign:
			campaign = true
		case HoldAll:
			all = true
		}
	}
	g.campaign.Store(campaign)
	g.all.Store(all)
}

// GatedTransport wraps a raft transport so that g can hold back its
// traffic. It keeps the optional interfaces raft looks for (pre-vote,
// close, peers) when inner has them.
func GatedTransport(inner raft.Transport, g *Gate) raft.Transport {
	return newGatedTransport(inner, g, nil, "")
}

// newGatedTransport is GatedTransport whose quiet heartbeats (SetQuiet) to
// peers go through beats, and whose group takes the heartbeats beats
// receives for group.
func newGatedTransport(inner raft.Transport, g *Gate, beats *beatHub, group string) *gatedTransport {
	t := &gatedTransport{Transport: inner, g: g, consumer: make(chan raft.RPC), done: make(chan struct{}),
		beats: beats, group: group}
	go t.filter()
	return t
}

type gatedTransport struct {
	raft.Transport
	g        *Gate
	consumer chan raft.RPC
	done     chan struct{}
	once     sync.Once

	// beats, when set, carries the group's heartbeats while quiet
	// (beats.go) and hands heartbeats for group to hb.
	beats *beatHub
	group string
	quiet atomic.Bool
	hbMu  sync.Mutex
	hb    func(raft.RPC)
}

// SetQuiet makes the group's heartbeats travel coalesced with those of
// the node's other quiet groups (beats.go) while on; raftgroup's Quiescer
// sets it as it quiets and wakes the group.
func (t *gatedTransport) SetQuiet(on bool) { t.quiet.Store(on) }

// SetHeartbeatHandler passes raft's heartbeat handler to the inner
// transport and keeps it for coalesced heartbeats.
func (t *gatedTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	t.Transport.SetHeartbeatHandler(cb)
	if t.beats == nil {
		return
	}
	t.hbMu.Lock()
	t.hb = cb
	t.hbMu.Unlock()
	t.beats.register(t.group, t)
}

// heartbeatHandler is raft's heartbeat handler; nil on a nil t.
func (t *gatedTransport) heartbeatHandler() func(raft.RPC) {
	if t == nil {
		return nil
	}
	t.hbMu.Lock()
	defer t.hbMu.Unlock()
	return t.hb
}

// filter passes incoming RPCs on to raft, refusing a TimeoutNow while
// campaigning is held: a replica that must not lead must not start the
// election a leadership transfer asks for (it would raise its term and
// depose the leader for nothing). Heartbeats do not come through here:
// the inner transport hands them to raft's heartbeat handler directly.
func (t *gatedTransport) filter() {
	in := t.Transport.Consumer()
	for {
		select {
		case rpc, ok := <-in:
			if !ok {
				close(t.consumer)
				return
			}
			if _, isTimeout := rpc.Command.(*raft.TimeoutNowRequest); isTimeout && t.g.Holding(HoldCampaign) {
				refuse(rpc)
				continue
			}
			select {
			case t.consumer <- rpc:
			case <-t.done:
				refuse(rpc)
				return
			}
		case <-t.done:
			return
		}
	}
}

// refuse answers rpc with ErrGated and a zero response of its own type:
// some transports read the response before the error (raft's in-memory
// pipeline does).
func refuse(rpc raft.RPC) {
	var resp interface{}
	switch rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		resp = &raft.AppendEntriesResponse{}
	case *raft.RequestVoteRequest:
		resp = &raft.RequestVoteResponse{}
	case *raft.RequestPreVoteRequest:
		resp = &raft.RequestPreVoteResponse{}
	case *raft.InstallSnapshotRequest:
		resp = &raft.InstallSnapshotResponse{}
	case *raft.TimeoutNowRequest:
		resp = &raft.TimeoutNowResponse{}
	}
	rpc.Respond(resp, ErrGated)
}

func (t *gatedTransport) Consumer() <-chan raft.RPC { return t.consumer }

func (t *gatedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if t.g.Holding(HoldAll) {
		return nil, ErrGated
	}
	p, err := t.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &gatedPipeline{AppendPipeline: p, g: t.g}, nil
}

func (t *gatedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.g.Holding(HoldAll) {
		return ErrGated
	}
	if t.beats != nil && t.quiet.Load() && isHeartbeat(args) {
		if err := t.beats.send(target, t.group, args, resp); !errors.Is(err, errNoBeats) {
			return err
		}
	}
	return t.Transport.AppendEntries(id, target, args, resp)
}

func (t *gatedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.g.Holding(HoldCampaign) {
		return ErrGated
	}
	return t.Transport.RequestVote(id, target, args, resp)
}

func (t *gatedTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if t.g.Holding(HoldAll) {
		return ErrGated
	}
	return t.Transport.InstallSnapshot(id, target, args, resp, data)
}

func (t *gatedTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if t.g.Holding(HoldAll) {
		return ErrGated
	}
	return t.Transport.TimeoutNow(id, target, args, resp)
}

// RequestPreVote implements raft.WithPreVote; an inner transport without
// pre-vote makes raft fall back to plain votes, which this refuses too.
func (t *gatedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if t.g.Holding(HoldCampaign) {
		return ErrGated
	}
	pv, ok := t.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("raftmux: inner transport has no pre-vote")
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// Ungated returns the transport t wraps if t is a GatedTransport, else t:
// for the one RPC a held replica must still send (raftgroup.NudgeElection).
func Ungated(t raft.Transport) raft.Transport {
	if g, ok := t.(*gatedTransport); ok {
		return g.Transport
	}
	return t
}

// Close stops the filter and closes the inner transport when it can be.
func (t *gatedTransport) Close() error {
	t.once.Do(func() {
		close(t.done)
		if t.beats != nil {
			t.beats.unregister(t.group, t)
		}
	})
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

type gatedPipeline struct {
	raft.AppendPipeline
	g *Gate
}

func (p *gatedPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if p.g.Holding(HoldAll) {
		return nil, ErrGated
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}

var (
	_ raft.WithPreVote = (*gatedTransport)(nil)
	_ raft.WithClose   = (*gatedTransport)(nil)
)
