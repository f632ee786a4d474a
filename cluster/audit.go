package cluster

import (
	"context"

	"github.com/raftq/raftq/meta/metapb"
)

// AppendAudit records r in the meta group, which this node must lead
// (server/audit.go forwards to the leader's peer port).
func (n *Node) AppendAudit(ctx context.Context, r *metapb.AuditRecord) error {
	return n.Meta().AppendAudit(ctx, r)
}
