package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"time"

	"github.com/raftq/raftq/backup"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
)

// BackupChunkBytes is the most data one backup chunk carries: a piece is
// streamed, never held whole, so a backup needs this much memory per
// piece in flight, whatever the size of the shards.
const BackupChunkBytes = 256 << 10

// pieceRetry is how long the gathering node waits before asking again
// for a piece whose group had no leader that would give it.
const pieceRetry = 250 * time.Millisecond

// BackupPiece streams this node's piece of group through send, if it leads
// the group (meta: the meta leader after a barrier; a shard: its leader
// after confirming leadership). Errors before the first chunk are
// refusals: nothing was sent.
func (n *Node) BackupPiece(ctx context.Context, group string, send func(*peerpb.BackupChunk) error) error {
	w := &chunkWriter{group: group, send: send, sum: sha256.New(), buf: make([]byte, 0, BackupChunkBytes)}
	var index, term uint64
	if group == "meta" {
		b, i, t, err := n.meta.BackupPiece(ctx)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		index, term = i, t
	} else {
		// The peer service checked the name and the shard's range.
		id, ok := parseShardGroup(group)
		if !ok {
			return fmt.Errorf("group %q is neither meta nor shard-N", group)
		}
		s := n.shards.get(id)
		if s == nil {
			lid, addr, _ := n.ShardLeader(id)
			return &raftgroup.NotLeaderError{Group: group, LeaderID: lid, LeaderAddr: addr}
		}
		var err error
		if index, term, err = s.BackupPiece(ctx, w); err != nil {
			return err
		}
	}
	if err := w.flush(); err != nil {
		return err
	}
	return send(&peerpb.BackupChunk{Group: group, End: true, Index: index, Term: term, Sha256: w.sum.Sum(nil), Size: w.size})
}

// chunkWriter cuts a piece into chunks of BackupChunkBytes as it is
// written and hashes it.
type chunkWriter struct {
	group string
	send  func(*peerpb.BackupChunk) error
	sum   hash.Hash
	buf   []byte
	size  uint64
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.sum.Write(p)
	w.size += uint64(len(p))
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), BackupChunkBytes-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == BackupChunkBytes {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	// A fresh buffer per chunk: gRPC may keep a sent message for stats
	// handlers, so a sent buffer is never written again.
	err := w.send(&peerpb.BackupChunk{Group: w.group, Data: w.buf})
	w.buf = make([]byte, 0, BackupChunkBytes)
	if err != nil {
		return fmt.Errorf("%s: send backup chunk: %w", w.group, err)
	}
	return nil
}

// BackupInfo opens a backup stream: what the backup is of.
type BackupInfo struct {
	ShardCount uint32
	ClusterID  string
}

// Backup gathers a backup from the leaders of every group: each shard's
// piece in shard order, then the meta piece, each through send as it
// arrives. Shards come first: the meta piece, taken last, then lists every
// queue a shard piece holds unless the queue was deleted meanwhile, and a
// restored shard never loses a queue to reconciliation against a meta
// state older than itself. A group without a leader willing to give its
// piece is asked again until ctx ends; a piece that breaks off once bytes
// were sent fails the backup.
func (n *Node) Backup(ctx context.Context, info func(BackupInfo) error, send func(*peerpb.BackupChunk) error) error {
	sm := n.meta.ShardMap()
	if !sm.Placed() {
		return errors.New("the shard map is not placed yet")
	}
	if err := info(BackupInfo{ShardCount: sm.Count, ClusterID: sm.ClusterID}); err != nil {
		return err
	}
	for id := uint32(0); id < sm.Count; id++ {
		if err := n.gatherPiece(ctx, shard.GroupName(id), send); err != nil {
			return err
		}
	}
	return n.gatherPiece(ctx, "meta", send)
}

func (n *Node) gatherPiece(ctx context.Context, group string, send func(*peerpb.BackupChunk) error) error {
	var lastErr error
	failed := ""
	for attempt := 0; ; attempt++ {
		src := n.pieceSource(group, attempt, failed)
		sent, err := n.pieceOnce(ctx, group, src, send)
		if err == nil {
			return nil
		}
		if sent {
			return fmt.Errorf("piece %s broke off: %w", group, err)
		}
		lastErr, failed = err, src
		select {
		case <-ctx.Done():
			return fmt.Errorf("piece %s: no leader gave it before the deadline: %w (last: %v)", group, ctx.Err(), lastErr)
		case <-time.After(pieceRetry):
		}
	}
}

// pieceSource is the node to ask for group's piece: its leader as this
// node knows it, unless that is the node that just failed (a dead leader
// stays the hint until someone names another); else the group's replicas
// in turn: a replica that does not lead refuses with its leader hint,
// which the next attempt follows.
func (n *Node) pieceSource(group string, attempt int, failed string) string {
	if group == "meta" {
		return n.meta.LeaderID()
	}
	id, _ := parseShardGroup(group)
	if leader, _, ok := n.ShardLeader(id); ok && leader != "" && leader != failed {
		return leader
	}
	var reps []string
	for _, r := range n.meta.ShardMap().Replicas[id] {
		if r != failed {
			reps = append(reps, r)
		}
	}
	if len(reps) == 0 {
		return ""
	}
	return reps[attempt%len(reps)]
}

// pieceOnce asks node for group's piece; sent says whether any chunk
// reached send.
func (n *Node) pieceOnce(ctx context.Context, group, leader string, send func(*peerpb.BackupChunk) error) (sent bool, err error) {
	counted := func(c *peerpb.BackupChunk) error {
		sent = true
		return send(c)
	}
	if leader == "" {
		return false, fmt.Errorf("%s: no leader known", group)
	}
	if leader == n.cfg.NodeID {
		err := n.BackupPiece(ctx, group, counted)
		return sent, err
	}
	m, ok := n.gossip.get(leader)
	if !ok {
		return false, fmt.Errorf("%s: leader %s is not a member", group, leader)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := n.cfg.Peers.BackupPiece(cctx, m, &peerpb.BackupPieceRequest{Group: group})
	if err != nil {
		return false, fmt.Errorf("%s at %s: %w", group, leader, err)
	}
	for {
		c, hint, err := st.Recv()
		if err != nil {
			if hint != "" && !sent {
				n.noteHint(group, hint)
			}
			return sent, fmt.Errorf("%s at %s: %w", group, leader, err)
		}
		if c.GetGroup() != group {
			return sent, fmt.Errorf("%s at %s: a chunk of %q", group, leader, c.GetGroup())
		}
		if err := counted(c); err != nil {
			return sent, err
		}
		if c.GetEnd() {
			return sent, nil
		}
	}
}

// noteHint records a refusing node's leader hint for a shard, so the next
// attempt asks that node.
func (n *Node) noteHint(group, hint string) {
	if id, ok := parseShardGroup(group); ok {
		n.NoteLeader(id, hint)
	}
}

// restoreID names the backup a node restores from in its gossip metadata
// ("" for none).
func restoreID(src *backup.Source) string {
	if src == nil {
		return ""
	}
	return src.Manifest.ClusterID + "@" + src.Manifest.CreatedAt.UTC().Format(time.RFC3339Nano)
}
