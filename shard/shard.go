// Package shard runs one raft group that hosts the queue FSM on the raft
// plumbing of package raftgroup: a group-commit proposer, leader duties
// (barrier, lease grace, clock ticks), long-poll receive and leadership
// notifications.
package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
)

// MaxClockSkew is the default bound on a node's clock offset from the
// cluster's median clock (raftq-node --max-clock-offset): a node beyond it
// does not lead (cluster's clock check), so the clocks of any two leaders
// differ by at most twice the bound (docs/clock.md).
const MaxClockSkew = 500 * time.Millisecond

// Config configures one shard replica.
type Config struct {
	ID        uint32 // shard id; raft group name GroupName(ID)
	NodeID    string // raft.ServerID of this replica
	Dir       string // raft.db and snapshots/
	Transport raft.Transport
	// Bootstrap, if non-empty and the replica has no raft state, bootstraps
	// the group with these voters (ErrCantBootstrap is ignored).
	Bootstrap []raft.Server
	// Seed, if set with Bootstrap, starts a new group from a backup's
	// piece instead of empty (raftgroup.Seed).
	Seed *raftgroup.Seed
	// Now stamps entries on the leader; default time.Now. Tests inject skew.
	Now    func() time.Time
	Logger *slog.Logger
	Raft   raftgroup.RaftTuning
	// MaxClockOffset is the clock bound the cluster enforces (default
	// MaxClockSkew). A new leader adds twice it to every earlier-term
	// lease (LeaderGrace.skew_ms), the most by which its clock can run
	// ahead of an earlier leader's.
	MaxClockOffset time.Duration
	// LeaseGrace is proposed by every new leader in LeaderGrace; default
	// election timeout + 2 × MaxClockOffset.
	LeaseGrace time.Duration
	// Node is the node's identity (raftstore.OpenNode); nil in tests of a
	// lone shard.
	Node *raftstore.Node
	// Damaged is called once if the replica finds damaged bytes while it
	// runs (raftgroup.RaftOptions.Damaged): the owner must shut the shard down, from
	// another goroutine.
	Damaged func(*raftstore.DamageError)
	// Gate is the raftmux.Gate that Transport was built with, so Sideline
	// can hold back this replica's raft traffic. Nil: Sideline still ends
	// leader duties, but raft's own traffic flows.
	Gate *raftmux.Gate
	// Disk says how the replica's raft writes are watched: a write stalled
	// past Disk.StallAfter sidelines it ("log-stall", all raft traffic
	// held) until the write completes; a write refused for lack of space
	// sidelines it from campaigning ("disk-full") until there is room; any
	// other write error calls Disk.OnFatal (raftgroup/logwatch.go).
	Disk raftgroup.DiskOptions
	// AdmitSend, if set, is asked before this leader proposes an enqueue;
	// an error refuses the send (nothing proposed) and is returned as is.
	// The node's disk-space guard refuses here with a *DiskFullError.
	AdmitSend func() error
	// NodeFormat returns a node's log format as the meta group recorded it
	// (0: none recorded). The leader proposes a command kind only once
	// every replica of the shard has the kind's fsm.CommandFormat. Nil:
	// every replica is taken to be at fsm.BaseFormat.
	NodeFormat func(nodeID string) uint32

	diskTest *raftgroup.DiskTestHooks
	// kindFormat, if set, replaces fsm.CommandFormat: tests gate a kind on
	// a format no release has yet.
	kindFormat func(*fsmpb.Command) uint32
	// maxQueuedSend, if set, replaces maxQueuedSendBytes (tests).
	maxQueuedSend int64
}

// GroupName is the raft group id of shard id on the raft mux.
func GroupName(id uint32) string { return "shard-" + strconv.FormatUint(uint64(id), 10) }

// Shard is one replica of one shard.
type Shard struct {
	cfg    Config
	logger *slog.Logger
	raft   *raft.Raft
	stores io.Closer
	// replica is the checked stores (raftstore): it records damage found
	// by comparing this replica with others.
	replica *raftstore.Replica
	fsm     *fsm.FSM
	disk    *raftgroup.DiskWatch

	sends        *sendQueue     // sends (bulk lane; sendqueue.go)
	rates        rateLimits     // send_rate quotas (ratelimit.go)
	fastCh       chan *proposal // everything else (see runProposer)
	proposerDone chan struct{}
	closing      chan struct{}
	raftDown     chan struct{} // closed once raft.Shutdown has returned
	closeOnce    sync.Once
	wg           sync.WaitGroup

	notifyCh   chan bool     // raft NotifyCh
	wantLeader atomic.Bool   // latest raft notification
	leaderKick chan struct{} // cap 1: leadership may have changed
	applyKick  chan struct{} // cap 1: an entry was applied (NextDue may move)
	lead       atomic.Pointer[leaderState]

	subMu   sync.Mutex
	subs    map[uint64]chan bool
	nextSub uint64
	ready   bool // last published leadership value

	gate      *raftmux.Gate
	sideMu    sync.Mutex
	sidelines map[string]raftmux.Hold // reasons this replica must not lead
	sidelined atomic.Bool             // len(sidelines) > 0

	checkpoints checkpoints // digests for replica comparison
	moves       moveCounts  // moves of messages while leader (moves.go)

	waitMu  sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	claimed map[string]uint64 // messages asked for by receives in flight (claim)

	stats struct {
		rounds, entries, commands, bytes, ticks atomic.Uint64
	}
}

// leaderState is one leadership term as seen by this replica.
type leaderState struct {
	leader bool
	term   uint64
	ready  chan struct{} // closed once barrier and grace are done
	lost   chan struct{} // closed when the term ends here
}

var notLeaderState = &leaderState{}

// Open starts the replica. It returns once raft runs; leadership comes later
// (Subscribe, IsLeader).
func Open(cfg Config) (*Shard, error) {
	if cfg.NodeID == "" || cfg.Dir == "" || cfg.Transport == nil {
		return nil, errors.New("shard: Config needs NodeID, Dir and Transport")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Raft = cfg.Raft.WithDefaults()
	if cfg.MaxClockOffset <= 0 {
		cfg.MaxClockOffset = MaxClockSkew
	}
	if cfg.LeaseGrace <= 0 {
		cfg.LeaseGrace = cfg.Raft.ElectionTimeout + 2*cfg.MaxClockOffset
	}
	s := &Shard{
		cfg:          cfg,
		logger:       cfg.Logger.With("shard", cfg.ID), // the caller's logger names the node
		sends:        newSendQueue(),
		fastCh:       make(chan *proposal, proposeQueue),
		proposerDone: make(chan struct{}),
		closing:      make(chan struct{}),
		raftDown:     make(chan struct{}),
		notifyCh:     make(chan bool, 16),
		leaderKick:   make(chan struct{}, 1),
		applyKick:    make(chan struct{}, 1),
		subs:         make(map[uint64]chan bool),
		waiters:      make(map[string]map[chan struct{}]struct{}),
		claimed:      make(map[string]uint64),
		gate:         cfg.Gate,
		sidelines:    make(map[string]raftmux.Hold),
	}
	if s.gate == nil {
		s.gate = &raftmux.Gate{}
	}
	s.lead.Store(notLeaderState)
	s.fsm = fsm.New(fsm.Options{Notify: s.notify, Checkpoint: s.checkpoints.record, Moves: s.onMoves})
	s.disk = raftgroup.NewDiskWatch(raftgroup.DiskWatchConfig{
		Group: GroupName(cfg.ID), Dir: cfg.Dir, Options: cfg.Disk, Logger: s.logger, Room: raftgroup.SpaceRoom(cfg.Raft),
		Test: cfg.diskTest,
	})
	g, err := raftgroup.OpenRaft(raftgroup.RaftOptions{
		NodeID:    cfg.NodeID,
		Dir:       cfg.Dir,
		Transport: cfg.Transport,
		Bootstrap: cfg.Bootstrap,
		Logger:    s.logger,
		Tuning:    cfg.Raft,
		NotifyCh:  s.notifyCh,
		Group:     GroupName(cfg.ID),
		Node:      cfg.Node,
		Damaged:   cfg.Damaged,
		Disk:      s.disk,
		Seed:      cfg.Seed,
	}, &appliedHook{FSM: s.fsm, after: s.kickApplied})
	if err != nil {
		_ = s.disk.Close()
		return nil, fmt.Errorf("shard %d: %w", cfg.ID, err)
	}
	s.raft, s.stores, s.replica = g.Raft, g, g.Replica
	r := g.Raft
	stalled := s.sidelineFor(reasonLogStall, raftmux.HoldAll)
	s.disk.Attach(func(on bool) {
		stalled(on)
		if on && r.State() == raft.Leader {
			go raftgroup.NudgeElection(r, cfg.Transport, raft.ServerID(cfg.NodeID), s.logger)
		}
	}, s.sidelineFor(reasonDiskFull, raftmux.HoldCampaign))
	s.wg.Add(3)
	go s.watchLeadership()
	go s.manageLeadership()
	go s.runProposer()
	return s, nil
}

// Replica is the replica's checked stores (raftstore).
func (s *Shard) Replica() *raftstore.Replica { return s.replica }

// FSM is the replica's state machine (reads are local and may be stale on
// a follower; use VerifyLeader first for linearizable reads).
func (s *Shard) FSM() *fsm.FSM { return s.fsm }

// Raft exposes the raft instance (membership changes, stats).
func (s *Shard) Raft() *raft.Raft { return s.raft }

// IsLeader reports whether this replica leads and finished its leader
// duties' preamble (barrier and grace), i.e. accepts proposals.
func (s *Shard) IsLeader() bool {
	st := s.lead.Load()
	if !st.leader || s.sidelined.Load() {
		return false
	}
	select {
	case <-st.ready:
		return true
	default:
		return false
	}
}

// Leader is raft's current leader hint; empty when unknown.
func (s *Shard) Leader() (raft.ServerID, raft.ServerAddress) {
	addr, id := s.raft.LeaderWithID()
	return id, addr
}

// Info is a point-in-time view of the replica.
type Info struct {
	State        raft.RaftState
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastIndex    uint64
	LeaderID     string
	LeaderAddr   string
	Ready        bool // leader with barrier and grace done
}

// Info reports raft state for status endpoints and tests.
func (s *Shard) Info() Info {
	id, addr := s.Leader()
	return Info{
		State:        s.raft.State(),
		Term:         s.raft.CurrentTerm(),
		CommitIndex:  s.raft.CommitIndex(),
		AppliedIndex: s.raft.AppliedIndex(),
		LastIndex:    s.raft.LastIndex(),
		LeaderID:     string(id),
		LeaderAddr:   string(addr),
		Ready:        s.IsLeader(),
	}
}

// LastSnapshot is the log index and term this replica's latest snapshot
// covers (0, 0: none yet). raft reports it only in Stats, which also asks
// its main loop for the configuration: for status calls, not for every
// metrics scrape (Info).
func (s *Shard) LastSnapshot() (index, term uint64) {
	stats := s.raft.Stats()
	index, _ = strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	term, _ = strconv.ParseUint(stats["last_snapshot_term"], 10, 64)
	return index, term
}

// ProposerStats counts what the proposer sent to raft on this replica.
type ProposerStats struct {
	Rounds   uint64 // group commits: bursts of entries handed to raft together
	Entries  uint64 // log entries proposed
	Commands uint64 // commands inside them
	Bytes    uint64 // encoded command bytes inside them
	Ticks    uint64 // Tick commands proposed by the leader timer
}

// ProposerStats reports proposer counters (Commands/Entries is the mean
// group-commit batch).
func (s *Shard) ProposerStats() ProposerStats {
	return ProposerStats{
		Rounds:   s.stats.rounds.Load(),
		Entries:  s.stats.entries.Load(),
		Commands: s.stats.commands.Load(),
		Bytes:    s.stats.bytes.Load(),
		Ticks:    s.stats.ticks.Load(),
	}
}

func (s *Shard) notLeader() error {
	id, addr := s.Leader()
	if id == raft.ServerID(s.cfg.NodeID) {
		// raft still names us while we are stepping down or not ready yet:
		// a hint pointing at ourselves would loop the caller.
		return &raftgroup.NotLeaderError{Group: GroupName(s.cfg.ID)}
	}
	return &raftgroup.NotLeaderError{Group: GroupName(s.cfg.ID), LeaderID: string(id), LeaderAddr: string(addr)}
}

// VerifyLeader confirms with a quorum that this replica still leads, for
// linearizable reads of FSM state after it returns.
func (s *Shard) VerifyLeader(ctx context.Context) error {
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	err := raftgroup.WaitFuture(ctx, s.raft.VerifyLeader(), s.raftDown)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost):
		return s.notLeader()
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrShutdown
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("shard %d: verify leader: %w", s.cfg.ID, err)
}

// waitReady returns nil once this replica leads and its duties' preamble is
// done. A leader that is still in its barrier makes callers wait rather
// than bounce: it will be ready within an election timeout or lose.
func (s *Shard) waitReady(ctx context.Context) error {
	select {
	case <-s.closing:
		return ErrShutdown
	default:
	}
	st := s.lead.Load()
	if !st.leader || s.sidelined.Load() {
		return s.notLeader()
	}
	select {
	case <-st.ready:
		return nil
	case <-st.lost:
		return s.notLeader()
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return ErrShutdown
	}
}

// Shutdown hands leadership to another voter if this replica leads (best
// effort, bounded by ctx and an election timeout's worth of tries), then
// stops raft and closes the stores and the transport.
func (s *Shard) Shutdown(ctx context.Context) error {
	first := false
	s.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	var errs []error
	if s.raft.State() == raft.Leader && s.hasOtherVoters() {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := raftgroup.WaitFuture(tctx, s.raft.LeadershipTransfer(), s.raftDown); err != nil {
			// Debug: the node tried the same hand-off just before (cluster.Node
			// logs its outcome at info); this is a second try.
			s.logger.Debug("leadership not handed off before stopping; the other replicas elect a leader", "err", err)
		}
		cancel()
	}
	close(s.closing)
	// A stable-store write waiting for space would hold raft's shutdown.
	_ = s.disk.Close()
	if err := s.raft.Shutdown().Error(); err != nil {
		errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
	}
	close(s.raftDown)
	s.wg.Wait()
	s.wakeAll()
	if err := s.stores.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close stores: %w", err))
	}
	if c, ok := s.cfg.Transport.(raft.WithClose); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close transport: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shard %d: shutdown: %w", s.cfg.ID, err)
	}
	return nil
}

func (s *Shard) hasOtherVoters() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter && srv.ID != raft.ServerID(s.cfg.NodeID) {
			return true
		}
	}
	return false
}

// appliedHook signals after every apply so the leader's tick timer can
// re-read NextDue without polling.
type appliedHook struct {
	*fsm.FSM
	after func()
}

func (h *appliedHook) Apply(l *raft.Log) interface{} {
	r := h.FSM.Apply(l)
	h.after()
	return r
}

func (h *appliedHook) ApplyBatch(logs []*raft.Log) []interface{} {
	r := h.FSM.ApplyBatch(logs)
	h.after()
	return r
}

func (h *appliedHook) Restore(rc io.ReadCloser) error {
	err := h.FSM.Restore(rc)
	h.after()
	return err
}

var _ raft.BatchingFSM = (*appliedHook)(nil)

func (s *Shard) kickApplied() { kick(s.applyKick) }

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
