package raftgroup

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/raftmux"
)

// Quiescing idle groups. An idle raft group costs its nodes mostly RPCs:
// hashicorp/raft's leader sends each follower a heartbeat every
// HeartbeatTimeout/10 to HeartbeatTimeout/5 and an AppendEntries every
// CommitTimeout to 2 × CommitTimeout, whether or not anything changes; at
// 128 shards on 3 nodes that was a fifth of a core per node
// (docs/benchmarks.md, "Idle cost of shards").
//
// A replica whose group applied nothing for QuietAfter raises its own
// HeartbeatTimeout and ElectionTimeout to QuietHeartbeat (raft's
// ReloadConfig), and its transport sends its heartbeats together with
// those of the node's other quiet groups (raftmux/beats.go); the first
// apply after that wakes it at the next look (quietLook). Each replica
// decides from what it applied itself, so no message is needed and no
// replica depends on another's decision:
//
//   - A quiet leader heartbeats every QuietHeartbeat/10 to /5, each
//     delayed up to raftmux.BeatWindow: 225 ms apart at most at the
//     defaults (1 s, 25 ms), below LeaderLeaseTimeout (500 ms;
//     QuietHeartbeat is capped at 3 × the lease), so a quiet leader keeps
//     its lease through a stall of 275 ms (an awake one, 50-100 ms apart,
//     through 400 ms), and an awake follower (one that applied an entry
//     before the leader's replica looked) keeps hearing from it within
//     its HeartbeatTimeout.
//   - Writes do not wait for heartbeats: raft replicates a new entry to
//     every follower as soon as the leader appends it, at any heartbeat
//     interval (TestQuiet_WriteDoesNotWaitForHeartbeat). A linearizable
//     read (VerifyLeader) on a quiet group waits for a coalesced
//     heartbeat round: up to BeatWindow longer.
//   - A quiet follower's own raft would wait QuietHeartbeat to
//     2 × QuietHeartbeat without contact before it campaigns, so the
//     Quiescer watches contact for it: a quiet follower that has heard
//     nothing from a leader for twice the longest gap between a quiet
//     leader's heartbeats, at least HeartbeatTimeout (500 ms at the
//     defaults, so a late heartbeat on a loaded machine starts no
//     election), plus a random part of HeartbeatTimeout, is woken, and
//     raft, handed the awake timeout, checks its last contact at once and
//     campaigns. A quiet group whose
//     leader dies, or is cut off from a follower while alive, therefore
//     elects another within 500 + 500 + quietLook = 1.25 s of the last
//     contact at the defaults, plus the election (a split vote waits
//     another ElectionTimeout to 2 × ElectionTimeout); an awake group
//     within 0.5-1 s. Gossip plays no part (TestQuiet_FailoverWithinBound).
const (
	// quietLook is how often the Quiescer looks at its groups: one timer
	// per node, not one per group. It bounds how late a quiet follower
	// notices a lost leader, and how long a group runs quiet after a
	// write.
	quietLook = 250 * time.Millisecond
)

// Quiescer quiets the idle raft groups of one node. Its one goroutine
// runs while it has groups. The zero value is not usable; see NewQuiescer.
type Quiescer struct {
	look   time.Duration
	logger *slog.Logger

	mu     sync.Mutex
	groups map[*quietGroup]struct{}
	stop   chan struct{}
	done   chan struct{}
}

// NewQuiescer returns a Quiescer that looks at its groups every look
// (quietLook when zero).
func NewQuiescer(look time.Duration, logger *slog.Logger) *Quiescer {
	if look <= 0 {
		look = quietLook
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Quiescer{look: look, logger: logger, groups: make(map[*quietGroup]struct{})}
}

// quietGroup is one group's quiescence state; only the Quiescer's goroutine
// touches the fields after add.
type quietGroup struct {
	r     *raft.Raft
	tr    quietTransport // nil if the transport cannot coalesce
	name  string
	after time.Duration
	// A quiet follower without contact for contact+jitter is woken; the
	// jitter, new after every wake, keeps the followers of a dead leader
	// from campaigning at once and splitting the vote, as raft's own
	// randomized timeout does.
	contact, jitter time.Duration
	awake, asleep   raft.ReloadableConfig // HeartbeatTimeout and ElectionTimeout of each state

	applied, last uint64
	changed       time.Time
	quiet         bool
}

// add starts watching r; the returned func stops it (call before
// raft.Shutdown completes or after: a reload of a shut down raft is
// harmless).
func (q *Quiescer) add(r *raft.Raft, tr raft.Transport, name string, tun RaftTuning) func() {
	awake := r.ReloadableConfig()
	asleep := awake
	asleep.HeartbeatTimeout = max(tun.QuietHeartbeat, awake.HeartbeatTimeout)
	asleep.ElectionTimeout = max(tun.QuietHeartbeat, awake.ElectionTimeout)
	qt, _ := tr.(quietTransport)
	g := &quietGroup{r: r, tr: qt, name: name, after: tun.QuietAfter, awake: awake, asleep: asleep,
		contact: max(2*(asleep.HeartbeatTimeout/5+raftmux.BeatWindow), awake.HeartbeatTimeout),
		jitter:  randomBelow(awake.HeartbeatTimeout),
		applied: r.AppliedIndex(), last: r.LastIndex(), changed: time.Now()}
	q.mu.Lock()
	q.groups[g] = struct{}{}
	if q.stop == nil {
		q.stop, q.done = make(chan struct{}), make(chan struct{})
		go q.run(q.stop, q.done)
	}
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		delete(q.groups, g)
		var stop, done chan struct{}
		if len(q.groups) == 0 && q.stop != nil {
			stop, done = q.stop, q.done
			q.stop, q.done = nil, nil
		}
		q.mu.Unlock()
		if stop != nil {
			close(stop)
			<-done
		}
	}
}

func (q *Quiescer) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(q.look)
	defer t.Stop()
	var gs []*quietGroup
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		q.mu.Lock()
		gs = gs[:0]
		for g := range q.groups {
			gs = append(gs, g)
		}
		q.mu.Unlock()
		now := time.Now()
		for _, g := range gs {
			q.lookAt(g, now)
		}
	}
}

// lookAt quiets g after it applied nothing for g.after and wakes it once
// it applies again.
func (q *Quiescer) lookAt(g *quietGroup, now time.Time) {
	applied, last := g.r.AppliedIndex(), g.r.LastIndex()
	if applied != g.applied || last != g.last {
		g.applied, g.last, g.changed = applied, last, now
		if g.quiet {
			g.quiet = !q.reload(g, false)
		}
		return
	}
	if !g.quiet {
		// Only a group with a leader goes quiet: a candidate keeps its
		// short election timeout, and so does a follower that knows no
		// leader (one would have made it wait for its Quiescer instead).
		if now.Sub(g.changed) >= g.after && hasLeader(g.r) {
			g.quiet = q.reload(g, true)
		}
		return
	}
	if g.r.State() == raft.Follower && now.Sub(g.r.LastContact()) > g.contact+g.jitter {
		q.logger.Info("quiet raft group lost contact with its leader: waking it to elect one", "group", g.name,
			"last_contact", g.r.LastContact().Format(time.RFC3339Nano))
		g.quiet = !q.reload(g, false)
		g.changed = now
		g.jitter = randomBelow(g.awake.HeartbeatTimeout)
	}
}

// hasLeader reports whether r leads or follows a leader it knows.
func hasLeader(r *raft.Raft) bool {
	switch r.State() {
	case raft.Leader:
		return true
	case raft.Follower:
		addr, _ := r.LeaderWithID()
		return addr != ""
	}
	return false
}

// randomBelow is a random duration in [0, d).
func randomBelow(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

// quietTransport is a transport that coalesces a quiet group's heartbeats
// with those of the node's other quiet groups (raftmux/beats.go).
type quietTransport interface{ SetQuiet(bool) }

// reload sets g's timeouts to the quiet or the awake ones, keeping the
// other reloadable fields as they are now, and tells the transport.
func (q *Quiescer) reload(g *quietGroup, quiet bool) bool {
	rc := g.awake
	if quiet {
		rc = g.asleep
	} else if g.tr != nil {
		g.tr.SetQuiet(false) // before the heartbeats speed up
	}
	cur := g.r.ReloadableConfig()
	cur.HeartbeatTimeout, cur.ElectionTimeout = rc.HeartbeatTimeout, rc.ElectionTimeout
	if err := g.r.ReloadConfig(cur); err != nil {
		q.logger.Warn("raft group timeouts not changed", "group", g.name, "heartbeat_timeout", rc.HeartbeatTimeout, "err", err)
		return false
	}
	if quiet && g.tr != nil {
		g.tr.SetQuiet(true)
	}
	return true
}
