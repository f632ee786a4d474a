package cluster

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
)

// diskCheckEvery spaces the free-space checks of the data dir.
const diskCheckEvery = time.Second

// DiskReserve is the free space a node keeps in its data directory: below
// it the node refuses new sends (the larger of Bytes and Percent of the
// filesystem). The zero value never refuses.
type DiskReserve struct {
	Bytes   uint64
	Percent float64
}

// of is the reserve on a filesystem of total bytes.
func (r DiskReserve) of(total uint64) uint64 {
	return max(r.Bytes, uint64(r.Percent/100*float64(total)))
}

// DiskSpace is the node's view of its data directory's filesystem.
type DiskSpace struct {
	Dir      string
	Known    bool   // the last check succeeded
	Free     uint64 // bytes the node may still use
	Total    uint64
	Reserve  uint64 // sends are refused below this
	Refusing bool   // sends are being refused
}

// diskGuard checks the data dir's free space every diskCheckEvery, warns
// when it runs low, and refuses sends (shard.Config.AdmitSend on the
// shards this node leads) while it is below the reserve. Receives, acks,
// nacks and deletes go on: they add little to the log, and acks and
// deletes are how a backlog (and so the next snapshot) shrinks. A
// follower's full disk refuses nothing: its leader decides, and raft
// copes with a follower that cannot append.
type diskGuard struct {
	node    string
	dir     string
	reserve DiskReserve
	logger  *slog.Logger
	space   func(string) (free, total uint64, err error)

	state    atomic.Pointer[DiskSpace]
	low      bool // below twice the reserve (loop only)
	failed   bool // the last check failed (loop only)
	refusing atomic.Bool
}

func newDiskGuard(node, dir string, reserve DiskReserve, logger *slog.Logger) *diskGuard {
	g := &diskGuard{node: node, dir: dir, reserve: reserve, logger: logger, space: raftgroup.DiskSpace}
	g.state.Store(&DiskSpace{Dir: dir})
	return g
}

func (g *diskGuard) loop(ctx context.Context) {
	t := time.NewTicker(diskCheckEvery)
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

// check samples the filesystem once and logs each change of state once.
func (g *diskGuard) check() {
	free, total, err := g.space(g.dir)
	if err != nil {
		// Fail open: a guard that cannot look refuses nothing.
		if !g.failed {
			g.logger.Warn("cannot check free disk space; sends are not refused for lack of space", "dir", g.dir, "err", err)
		}
		g.failed = true
		g.refusing.Store(false)
		g.state.Store(&DiskSpace{Dir: g.dir})
		return
	}
	g.failed = false
	reserve := g.reserve.of(total)
	// Resume a little above the reserve, so a disk hovering at the edge
	// does not flip sends (and its log lines) on and off every second.
	margin := max(reserve/20, 1<<20)
	refusing := g.refusing.Load()
	switch {
	case reserve == 0:
		refusing = false
	case free < reserve && !refusing:
		refusing = true
		g.logger.Error("disk almost full: refusing new sends until space is freed (receives, acks and deletes go on)",
			"dir", g.dir, "free", shard.FormatBytes(free), "reserve", shard.FormatBytes(reserve))
	case free >= reserve+margin && refusing:
		refusing = false
		g.logger.Info("disk space recovered: accepting sends again", "dir", g.dir, "free", shard.FormatBytes(free), "reserve", shard.FormatBytes(reserve))
	}
	g.refusing.Store(refusing)
	switch {
	case reserve > 0 && free < 2*reserve && !g.low:
		g.low = true
		g.logger.Warn("disk space low: sends will be refused below the reserve", "dir", g.dir,
			"free", shard.FormatBytes(free), "reserve", shard.FormatBytes(reserve))
	case g.low && free >= 2*reserve+margin:
		g.low = false
	}
	g.state.Store(&DiskSpace{Dir: g.dir, Known: true, Free: free, Total: total, Reserve: reserve, Refusing: refusing})
}

// admitSend refuses a send while the disk is below its reserve.
func (g *diskGuard) admitSend() error {
	if !g.refusing.Load() {
		return nil
	}
	st := g.state.Load()
	return &shard.DiskFullError{Node: g.node, Dir: g.dir, Free: st.Free, Reserve: st.Reserve}
}

// admitSend is every shard's AdmitSend: a send is refused while the disk
// is below its reserve or memory above the refusal mark.
func (n *Node) admitSend() error {
	if err := n.disk.admitSend(); err != nil {
		return err
	}
	return n.mem.admitSend()
}

// DiskSpace reports the data directory's free space as last checked.
func (n *Node) DiskSpace() DiskSpace { return *n.disk.state.Load() }

// RaftDiskStats reports the raft store writes of the meta replica and of
// every local shard replica.
func (n *Node) RaftDiskStats() []raftgroup.DiskStats {
	var out []raftgroup.DiskStats
	if st, ok := n.meta.DiskStats(); ok {
		out = append(out, st)
	}
	for _, s := range n.shards.all() {
		out = append(out, s.DiskStats())
	}
	return out
}
