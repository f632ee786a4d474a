package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/shard"
)

// closeUnassigned closes each open replica the shard map no longer places
// on this node and sets its directory aside. The map drops a replica only
// after its group removed it through raft (the move's DONE step follows
// the removal, cluster/moves.go), so nothing the group needs is lost; the
// directory is kept, renamed, for an operator to delete.
func (ss *shardSet) closeUnassigned(ctx context.Context, m meta.ShardMap) {
	for _, s := range ss.all() {
		id := s.ID()
		if m.Hosts(id, ss.n.cfg.NodeID) {
			continue
		}
		if err := ss.closeAndSetAside(ctx, id, s); err != nil {
			ss.n.logger.Error("closing a replica the shard map no longer places here; will retry", "shard", id, "err", err)
		}
	}
}

func (ss *shardSet) closeAndSetAside(ctx context.Context, id uint32, s *shard.Shard) error {
	ss.mu.Lock()
	if ss.local[id] != s {
		ss.mu.Unlock()
		return nil
	}
	delete(ss.local, id)
	// The replica's last word on its leader becomes the hint for the shard
	// it no longer hosts, so this node's views and forwards name a leader
	// at once rather than after its next refused forward.
	if leader, _ := s.Leader(); leader != "" && string(leader) != ss.n.cfg.NodeID {
		ss.hints[id] = string(leader)
	}
	stop := ss.stops[id]
	delete(ss.stops, id)
	ss.mu.Unlock()
	if stop != nil {
		stop()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		ss.n.logger.Warn("shutting down a removed replica", "shard", id, "err", err)
	}
	dir := filepath.Join(ss.n.cfg.DataDir, "shards", strconv.FormatUint(uint64(id), 10))
	to := fmt.Sprintf("%s.removed-%s", dir, time.Now().UTC().Format("20060102T150405.000000000"))
	if err := os.Rename(dir, to); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("set aside %s: %w", dir, err)
	}
	if err := ss.n.ident.Forget(shardGroup(id)); err != nil {
		return fmt.Errorf("forget %s in node.json: %w", shardGroup(id), err)
	}
	ss.n.logger.Warn("replica moved off this node: closed and set aside (delete it once you no longer need it)",
		"shard", id, "moved_to", to)
	return nil
}
