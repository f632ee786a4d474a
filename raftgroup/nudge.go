package raftgroup

import (
	"log/slog"
	"math/rand/v2"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftmux"
)

// NudgeElection asks one other voter of r's group to start an election at
// once: a TimeoutNow RPC, sent past this replica's raft gate (tr is the
// group's transport). A leader whose log write is stuck holds back all its
// raft traffic so that its followers elect someone else (Sideline with
// raftmux.HoldAll), but they would first wait out their heartbeat timeout;
// this saves that wait. raft's own LeadershipTransfer cannot be used: it
// runs in the leader loop, which is stuck in the write.
//
// Any voter will do: the stuck leader stores each batch before it
// replicates it, so by the time the stall is noticed its followers have
// everything it replicated. If the chosen one is behind after all, its
// election fails and the others time out as they would have anyway.
// GetConfiguration reads raft's latest configuration without its loop.
func NudgeElection(r *raft.Raft, tr raft.Transport, self raft.ServerID, logger *slog.Logger) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var peers []raft.Server
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter && srv.ID != self {
			peers = append(peers, srv)
		}
	}
	if len(peers) == 0 {
		return
	}
	to := peers[rand.IntN(len(peers))]
	inner := raftmux.Ungated(tr)
	req := &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(self),
		Addr:            inner.EncodePeer(self, inner.LocalAddr()),
	}}
	if err := inner.TimeoutNow(to.ID, to.Address, req, &raft.TimeoutNowResponse{}); err != nil {
		logger.Warn("asking a follower to take over from this stalled leader failed; the followers will time out instead", "to", to.ID, "err", err)
		return
	}
	logger.Warn("asked a follower to take over from this stalled leader", "to", to.ID)
}
