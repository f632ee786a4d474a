package cluster

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/shard"
)

// memCheckEvery spaces the memory guard's samples. Sends arrive at most
// wire.MaxRequestBytes each and the proposer holds at most a few MiB in
// flight, so between two samples the heap grows by far less than the gap
// between the refusal threshold and the budget.
const memCheckEvery = 100 * time.Millisecond

// memStaleAfter is how long a refusing guard trusts a live-heap figure no
// collection has renewed before it forces one.
const memStaleAfter = time.Second

// Memory guard thresholds, as fractions of the budget. The guard watches
// the live heap (what the last garbage collection kept): with the Go
// memory limit at the budget (cmd/node sets it), the collector holds the
// whole heap under the limit as long as the live heap stays well below
// it, so refusing at 60 % leaves room for the garbage of a busy node,
// raft's buffers and a snapshot being written.
const (
	memRefuseAt = 0.60
	memResumeAt = 0.50
	memWarnAt   = 0.45
)

// MemoryUse is the node's view of its memory against its budget.
type MemoryUse struct {
	Budget   uint64 // bytes; 0: no budget, nothing is refused
	Live     uint64 // live heap after the last collection
	Refusing bool   // sends are being refused
}

// memGuard samples the live heap every memCheckEvery and refuses sends
// (shard.Config.AdmitSend on the shards this node leads) while it is above
// memRefuseAt of the budget, like diskGuard: receives, acks and deletes go
// on, since they are how memory is freed.
type memGuard struct {
	node   string
	budget uint64
	logger *slog.Logger
	live   func() uint64

	// collect forces a garbage collection (runtime.GC).
	collect func()

	state    atomic.Pointer[MemoryUse]
	warned   bool      // loop only
	lastLive uint64    // loop only: the previous sample
	stale    time.Time // loop only: since when the sample has not moved
	refusing atomic.Bool
}

func newMemGuard(node string, budget uint64, logger *slog.Logger) *memGuard {
	g := &memGuard{node: node, budget: budget, logger: logger, live: liveHeap, collect: runtime.GC}
	g.state.Store(&MemoryUse{Budget: budget})
	return g
}

// liveHeap reads the live heap from the runtime without stopping the world.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func (g *memGuard) loop(ctx context.Context) {
	if g.budget == 0 {
		return
	}
	t := time.NewTicker(memCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.check()
		}
	}
}

// check samples the live heap once and logs each change of state once.
func (g *memGuard) check() {
	if g.budget == 0 {
		return
	}
	live := g.live()
	// The live heap is measured by a collection, and an idle node runs
	// none: once consumers have drained a backlog that made it refuse,
	// the figure would stay high and sends refused for minutes. While
	// refusing, a figure unchanged for memStaleAfter is measured afresh.
	if live != g.lastLive {
		g.lastLive, g.stale = live, time.Now()
	} else if g.refusing.Load() && time.Since(g.stale) >= memStaleAfter {
		g.collect()
		live = g.live()
		g.lastLive, g.stale = live, time.Now()
	}
	refuseAt := uint64(memRefuseAt * float64(g.budget))
	resumeAt := uint64(memResumeAt * float64(g.budget))
	refusing := g.refusing.Load()
	switch {
	case live >= refuseAt && !refusing:
		refusing = true
		g.logger.Error("memory near the budget: refusing new sends until consumers drain (receives, acks and deletes go on)",
			"live_heap", shard.FormatBytes(live), "budget", shard.FormatBytes(g.budget), "refuse_at", shard.FormatBytes(refuseAt))
	case live < resumeAt && refusing:
		refusing = false
		g.logger.Info("memory back under the budget's resume mark: accepting sends again",
			"live_heap", shard.FormatBytes(live), "resume_at", shard.FormatBytes(resumeAt))
	}
	g.refusing.Store(refusing)
	warnAt := uint64(memWarnAt * float64(g.budget))
	switch {
	case live >= warnAt && !g.warned:
		g.warned = true
		g.logger.Warn("memory filling: sends will be refused at 60 % of the budget", "live_heap", shard.FormatBytes(live), "budget", shard.FormatBytes(g.budget))
	case live < resumeAt*9/10 && g.warned:
		g.warned = false
	}
	g.state.Store(&MemoryUse{Budget: g.budget, Live: live, Refusing: refusing})
}

// admitSend refuses a send while the live heap is above the refusal mark.
func (g *memGuard) admitSend() error {
	if !g.refusing.Load() {
		return nil
	}
	st := g.state.Load()
	return &shard.MemoryFullError{Node: g.node, Live: st.Live, Budget: st.Budget}
}

// MemoryUse reports the node's live heap against its budget, as last
// sampled.
func (n *Node) MemoryUse() MemoryUse { return *n.mem.state.Load() }
