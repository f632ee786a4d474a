package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftstore"
	"github.com/raftq/raftq/shard"
)

// Replicas compared continuously: every shard leader, every
// DigestInterval (stretched so hashing takes at most ~2 % of the time),
// proposes a checkpoint; each replica hashes its state as of that entry
// (shard/checkpoints.go) and the leader gathers the digests. A replica
// whose digest differs from the one a quorum of voters shares is told so
// and marks itself damaged (it stops voting and serving until repaired);
// a leader that is the odd one out marks itself. Without a quorum on one
// digest nothing is fenced: the disagreement is logged and counted.

const (
	// digestStretch bounds the comparison's cost: the next one waits at
	// least this many times as long as the last hash took.
	digestStretch = 50
	// digestGather bounds how long the leader waits for the replicas'
	// digests of one checkpoint.
	digestGather = 30 * time.Second
)

// DigestStats counts this node's replica comparisons as a shard leader.
type DigestStats struct {
	Matched, Diverged, Undecided, Failed uint64
}

type digestCounters struct{ matched, diverged, undecided, failed atomic.Uint64 }

// DigestStats reports the comparisons this node led.
func (n *Node) DigestStats() DigestStats {
	c := &n.digests
	return DigestStats{Matched: c.matched.Load(), Diverged: c.diverged.Load(), Undecided: c.undecided.Load(), Failed: c.failed.Load()}
}

// digestLoop compares the replicas of every shard this node leads.
func (n *Node) digestLoop(ctx context.Context) {
	if n.cfg.DigestInterval < 0 {
		return
	}
	next := map[uint32]time.Time{}
	tick := time.NewTicker(min(n.cfg.DigestInterval, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, s := range n.shards.all() {
			id := s.ID()
			if !s.IsLeader() {
				delete(next, id)
				continue
			}
			if t, ok := next[id]; !ok {
				// A new leader waits one interval: its followers may be
				// catching up, and nothing is gained by comparing at once.
				next[id] = time.Now().Add(n.cfg.DigestInterval)
				continue
			} else if time.Now().Before(t) {
				continue
			}
			took := n.compareReplicas(ctx, s)
			next[id] = time.Now().Add(max(n.cfg.DigestInterval, digestStretch*took))
		}
	}
}

// compareReplicas runs one comparison of shard s and returns how long this
// replica's hash took.
func (n *Node) compareReplicas(ctx context.Context, s *shard.Shard) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, digestGather)
	defer cancel()
	logger := n.logger.With("shard", s.ID())
	cp, err := s.Checkpoint(ctx)
	if err != nil {
		n.digests.failed.Add(1)
		logger.Debug("replica comparison: checkpoint not proposed", "err", err)
		return 0
	}
	start := time.Now()
	own, index, err := s.CheckpointDigest(ctx, cp)
	took := time.Since(start)
	if err != nil {
		n.digests.failed.Add(1)
		logger.Warn("replica comparison: own digest", "err", err)
		return took
	}
	f := s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		n.digests.failed.Add(1)
		return took
	}
	digests := map[string][]byte{n.cfg.NodeID: own[:]}
	voters := 0
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			voters++
		}
		id := string(srv.ID)
		if id == n.cfg.NodeID {
			continue
		}
		m, ok := n.gossip.get(id)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := n.peerDigest(ctx, m, s.ID(), cp, nil)
			if err != nil {
				logger.Debug("replica comparison: no digest", "replica", id, "err", err)
				return
			}
			mu.Lock()
			digests[id] = d
			mu.Unlock()
		}()
	}
	wg.Wait()
	quorum, agree := quorumDigest(digests, f.Configuration(), voters)
	if quorum == nil {
		if len(distinct(digests)) > 1 {
			n.digests.undecided.Add(1)
			logger.Error("replicas disagree and no quorum shares one state digest: none is fenced", "index", index, "digests", hexes(digests))
		}
		return took
	}
	diverged := 0
	for id, d := range digests {
		if bytes.Equal(d, quorum) {
			continue
		}
		diverged++
		logger.Error("replica state diverged: fencing it", "replica", id, "index", index, "its", fmt.Sprintf("%x", d[:8]), "quorum", fmt.Sprintf("%x", quorum[:8]), "agreeing", agree)
		if id == n.cfg.NodeID {
			s.Replica().Damage(raftstore.Diverged(s.Replica(), index, d, quorum))
			continue
		}
		if m, ok := n.gossip.get(id); ok {
			if _, err := n.peerDigest(ctx, m, s.ID(), cp, quorum); err != nil {
				logger.Warn("could not tell a diverged replica to stop", "replica", id, "err", err)
			}
		}
	}
	if diverged > 0 {
		n.digests.diverged.Add(1)
	} else {
		n.digests.matched.Add(1)
	}
	return took
}

// quorumDigest is the digest a majority of voters recorded, if any, and
// how many replicas have it.
func quorumDigest(digests map[string][]byte, cfg raft.Configuration, voters int) ([]byte, int) {
	counts := map[string]int{}
	for _, srv := range cfg.Servers {
		if d, ok := digests[string(srv.ID)]; ok && srv.Suffrage == raft.Voter {
			counts[string(d)]++
		}
	}
	for d, c := range counts {
		if c > voters/2 {
			agree := 0
			for _, x := range digests {
				if string(x) == d {
					agree++
				}
			}
			return []byte(d), agree
		}
	}
	return nil, 0
}

func distinct(digests map[string][]byte) map[string]bool {
	out := map[string]bool{}
	for _, d := range digests {
		out[string(d)] = true
	}
	return out
}

func hexes(digests map[string][]byte) map[string]string {
	out := map[string]string{}
	for id, d := range digests {
		out[id] = fmt.Sprintf("%x", d[:min(8, len(d))])
	}
	return out
}

// peerDigest asks a replica for its digest at checkpoint cp, waiting while
// it has not applied it yet; with quorum set it tells the replica what the
// quorum recorded.
func (n *Node) peerDigest(ctx context.Context, m Member, shardID uint32, cp uint64, quorum []byte) ([]byte, error) {
	req := &peerpb.ShardDigestRequest{ShardId: shardID, Checkpoint: cp, QuorumDigest: quorum}
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := n.cfg.Peers.ShardDigest(cctx, m, req)
		cancel()
		if err == nil {
			return resp.GetDigest(), nil
		}
		if status.Code(err) != codes.NotFound && !errors.Is(err, shard.ErrNoCheckpoint) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ShardDigest answers a replica comparison for this node's replica of a
// shard: its digest at the checkpoint (shard.ErrNoCheckpoint while it has
// not applied it). With a quorum digest it is the leader saying what a
// quorum recorded: a replica whose own digest differs marks itself damaged
// (its state diverged) and stops voting and serving.
func (n *Node) ShardDigest(ctx context.Context, req *peerpb.ShardDigestRequest) (*peerpb.ShardDigestResponse, error) {
	s := n.shards.get(req.GetShardId())
	if s == nil {
		return nil, fmt.Errorf("node %s holds no open replica of shard %d: %w", n.cfg.NodeID, req.GetShardId(), shard.ErrNoCheckpoint)
	}
	sum, index, err := s.CheckpointDigest(ctx, req.GetCheckpoint())
	if err != nil {
		return nil, err
	}
	resp := &peerpb.ShardDigestResponse{NodeId: n.cfg.NodeID, AppliedIndex: index, Digest: sum[:]}
	if q := req.GetQuorumDigest(); len(q) > 0 && !bytes.Equal(q, sum[:]) {
		n.logger.Error("this replica's state diverged from its group's: it stops voting and serving", "shard", req.GetShardId(), "index", index)
		s.Replica().Damage(raftstore.Diverged(s.Replica(), index, sum[:], q))
		resp.Diverged = true
	}
	return resp, nil
}
