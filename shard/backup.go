package shard

import (
	"context"
	"fmt"
	"io"
)

// BackupPiece writes this shard's piece of a backup to w: the FSM's
// snapshot stream at its applied index, taken on the leader once it has
// confirmed its leadership with a quorum. A leader's state holds every
// entry committed before its term (the barrier of its duties' preamble)
// and every entry it acknowledged itself, so the piece holds every message
// acknowledged before the call. It returns the applied index the piece
// belongs to and a term at least that of every entry in it. A replica that does not lead returns
// a *raftgroup.NotLeaderError before writing anything.
func (s *Shard) BackupPiece(ctx context.Context, w io.Writer) (index, term uint64, err error) {
	if err := s.VerifyLeader(ctx); err != nil {
		return 0, 0, err
	}
	index, err = s.fsm.WriteBackup(w)
	if err != nil {
		return 0, 0, fmt.Errorf("shard %d: backup: %w", s.cfg.ID, err)
	}
	// Read after the state: no entry in it has a later term, so a group
	// seeded at this term keeps lease terms below every new term.
	return index, s.raft.CurrentTerm(), nil
}
