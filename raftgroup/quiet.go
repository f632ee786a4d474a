package raftgroup

import (
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Quiescing idle groups. An idle raft group costs its nodes mostly RPCs:
// hashicorp/raft's leader sends each follower a heartbeat every
// HeartbeatTimeout/10 to HeartbeatTimeout/5 and an AppendEntries every
// CommitTimeout to 2×CommitTimeout, whether or not anything changes; at
// 128 shards on 3 nodes that was a fifth of a core per node
// (docs/benchmarks.md, "Idle cost of shards").
//
// A replica whose group applied nothing for QuietAfter raises its own
// HeartbeatTimeout and ElectionTimeout to QuietHeartbeat (raft's
// ReloadConfig); the first apply after that lowers them again at the next
// look (quietLook). Each replica decides from what it applied itself, so
// no message is needed and no replica depends on another's decision:
//
//   - A quiet leader heartbeats every QuietHeartbeat/10 to /5. That stays
//     below LeaderLeaseTimeout (QuietHeartbeat is capped at 4 × the lease),
//     so a quiet leader keeps its lease, and an awake follower (one that
//     applied an entry the leader's replica has not looked at yet) keeps
//     hearing from it within its normal HeartbeatTimeout.
//   - Writes do not wait for heartbeats: raft replicates a new entry to
//     every follower as soon as the leader appends it, at any heartbeat
//     interval (TestQuiet_WriteDoesNotWaitForHeartbeat).
//   - A quiet follower's own raft would wait QuietHeartbeat to
//     2 × QuietHeartbeat without contact before it campaigns, so the
//     Quiescer watches contact for it: a quiet follower that has not heard
//     from a leader for twice the longest gap between a quiet leader's
//     heartbeats (2 × QuietHeartbeat/5: 800 ms at the defaults, so a late
//     heartbeat on a loaded machine starts no election) is woken, and raft, handed the awake
//     timeout, campaigns at once (a shorter timeout makes raft check its
//     last contact immediately). A quiet group whose leader dies, or is cut
//     off from a follower while alive, therefore elects another within
//     that + quietLook of the last contact, plus the election (a
//     split vote waits another ElectionTimeout to 2 × ElectionTimeout);
//     gossip plays no part (TestQuiet_FailoverWithinBound).
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
	r             *raft.Raft
	name          string
	after         time.Duration
	contact       time.Duration         // a quiet follower without contact this long is woken
	awake, asleep raft.ReloadableConfig // HeartbeatTimeout and ElectionTimeout of each state

	applied, last uint64
	changed       time.Time
	quiet         bool
}

// add starts watching r; the returned func stops it (call before
// raft.Shutdown completes or after: a reload of a shut down raft is
// harmless).
func (q *Quiescer) add(r *raft.Raft, name string, tun RaftTuning) func() {
	awake := r.ReloadableConfig()
	asleep := awake
	asleep.HeartbeatTimeout = max(tun.QuietHeartbeat, awake.HeartbeatTimeout)
	asleep.ElectionTimeout = max(tun.QuietHeartbeat, awake.ElectionTimeout)
	g := &quietGroup{r: r, name: name, after: tun.QuietAfter, awake: awake, asleep: asleep,
		contact: max(2*asleep.HeartbeatTimeout/5, awake.HeartbeatTimeout),
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
			g.quiet = !q.reload(g, g.awake)
		}
		return
	}
	if !g.quiet {
		if now.Sub(g.changed) >= g.after {
			g.quiet = q.reload(g, g.asleep)
		}
		return
	}
	if g.r.State() == raft.Follower && now.Sub(g.r.LastContact()) > g.contact {
		q.logger.Info("quiet raft group lost contact with its leader: waking it to elect one", "group", g.name,
			"last_contact", g.r.LastContact().Format(time.RFC3339Nano))
		g.quiet = !q.reload(g, g.awake)
		g.changed = now
	}
}

// reload sets g's timeouts to rc's, keeping the other reloadable fields
// as they are now.
func (q *Quiescer) reload(g *quietGroup, rc raft.ReloadableConfig) bool {
	cur := g.r.ReloadableConfig()
	cur.HeartbeatTimeout, cur.ElectionTimeout = rc.HeartbeatTimeout, rc.ElectionTimeout
	if err := g.r.ReloadConfig(cur); err != nil {
		q.logger.Warn("raft group timeouts not changed", "group", g.name, "heartbeat_timeout", rc.HeartbeatTimeout, "err", err)
		return false
	}
	return true
}
