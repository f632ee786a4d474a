package meta

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

// commandFormats is the log format each meta command kind needs, by its
// oneof field name in metapb.Command; the formats are the same numbers as
// the shard log's (fsm.LogFormat). Every kind must be listed
// (TestCommandFormatsCoverEveryKind).
//
// node_format is format 1 like the rest, but a binary that predates log
// formats stops on it: the cluster proposes it only while every meta
// replica advertises a format (cluster/formats.go).
var commandFormats = map[protoreflect.Name]uint32{
	"create_queue": 1,
	"update_queue": 1,
	"delete_queue": 1,
	"place_shards": 1,
	"node_format":  1,
	// Format 2: replica moves and drains (docs/cluster.md, "Replica
	// moves"); a replica of format 1 would stop on them.
	"move_step":   2,
	"retire_node": 2,
	"drain_node":  2,
	// Format 3: balanced preferred leaders (docs/cluster.md,
	// "Rebalancing"); a replica of format 2 would stop on it.
	"prefer_leader": 3,
	// Format 3: aborting a move at ADD (docs/cluster.md, "Replica moves").
	"abort_move": 3,
	// Format 4: growing the shard count and moving hash slots
	// (meta/grow.go, meta/slotmoves.go); a replica of format 3 would stop
	// on them.
	"grow_shards":      4,
	"slot_move_step":   4,
	"abort_slot_move":  4,
	"forget_slot_move": 4,
	// Format 5: API keys and the audit trail (meta/access.go); a replica
	// of format 4 would stop on them.
	"create_api_key": 5,
	"rotate_api_key": 5,
	"revoke_api_key": 5,
	"append_audit":   5,
	// Format 6: tenants and quotas (meta/tenants.go); a replica of format
	// 5 would stop on them. Older kinds that carry a tenant's name or
	// quotas need it too (contentFormat).
	"put_tenant":    6,
	"delete_tenant": 6,
	// Format 7: pausing a queue (meta/pause.go); a replica of format 6
	// would stop on it.
	"pause_queue": 7,
	// Format 7: recurring jobs (meta/cron.go); a replica of format 6
	// would stop on them.
	"create_cron_schedule":  7,
	"set_cron_paused":       7,
	"delete_cron_schedule":  7,
	"trigger_cron_schedule": 7,
	"record_cron_fire":      7,
}

// contentFormat is the format a command of an older kind needs for what
// it carries: a replica of format 5 would ignore an API key's tenant (and
// let it act outside it) or a queue's quotas, and refuse a tenant's queue
// name, each leaving its state apart from the leader's.
func contentFormat(c *metapb.Command) uint32 {
	if n := resultsFormat(c); n != 0 {
		return n
	}
	tenancy := func(name string, p *fsmpb.QueuePolicy) bool {
		return fsm.TenantOf(name) != "" || p.GetQuotas() != nil
	}
	switch k := c.GetCmd().(type) {
	case *metapb.Command_CreateQueue:
		if tenancy(k.CreateQueue.GetName(), k.CreateQueue.GetPolicy()) {
			return 6
		}
	case *metapb.Command_UpdateQueue:
		if tenancy(k.UpdateQueue.GetName(), k.UpdateQueue.GetPolicy()) {
			return 6
		}
	case *metapb.Command_CreateApiKey:
		if k.CreateApiKey.GetKey().GetTenant() != "" {
			return 6
		}
	}
	return 0
}

// CommandFormat is the log format a meta command needs from every replica;
// a kind missing from the table needs fsm.LogFormat.
func CommandFormat(c *metapb.Command) uint32 {
	m := c.ProtoReflect()
	f := m.WhichOneof(m.Descriptor().Oneofs().ByName("cmd"))
	if f == nil {
		return fsm.BaseFormat
	}
	if n, ok := commandFormats[f.Name()]; ok {
		return max(n, contentFormat(c), deadRetentionFormat(c), fanoutFormat(c), topUpFormat(c))
	}
	return fsm.LogFormat
}

func kindName(c *metapb.Command) string {
	m := c.ProtoReflect()
	if f := m.WhichOneof(m.Descriptor().Oneofs().ByName("cmd")); f != nil {
		return string(f.Name())
	}
	return "empty"
}

// checkFormat refuses cmd with a *fsm.FormatLagError if a replica (voter
// or nonvoter) of the meta group has not recorded the log format its kind
// needs. Kinds of the base format pass without reading the configuration.
func (s *Store) checkFormat(cmd *metapb.Command) error {
	need := CommandFormat(cmd)
	if s.kindFormat != nil {
		need = s.kindFormat(cmd)
	}
	if need <= fsm.BaseFormat {
		return nil
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("meta: configuration: %w", err)
	}
	return fsm.CheckFormat("meta", kindName(cmd), need, Servers(f.Configuration()), s.fsm.NodeFormat)
}

// Servers lists the ids of every server of a raft configuration, voters
// and nonvoters.
func Servers(c raft.Configuration) []string {
	out := make([]string, len(c.Servers))
	for i, srv := range c.Servers {
		out[i] = string(srv.ID)
	}
	return out
}

// RecordNodeFormat records nodeID's advertised log format in the meta log,
// so that every node gates command kinds on the same formats. A node whose
// binary was rolled back records a lower format the same way.
func (s *Store) RecordNodeFormat(ctx context.Context, nodeID string, format uint32) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_NodeFormat{NodeFormat: &metapb.NodeFormat{NodeId: nodeID, Format: format}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("record log format %d of node %s: %w", format, nodeID, err)
	}
	return nil
}

// NodeFormat is nodeID's recorded log format from the local replica, 0 if
// none is recorded.
func (s *Store) NodeFormat(nodeID string) uint32 { return s.fsm.NodeFormat(nodeID) }

// NodeFormats lists every recorded log format, sorted by node id.
func (s *Store) NodeFormats() []fsm.NodeFormat { return s.fsm.NodeFormats() }

func (f *FSM) nodeFormat(c *metapb.NodeFormat) *metapb.Result {
	if c.GetNodeId() == "" || c.GetFormat() == 0 {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "node id and a format above 0 required"}
	}
	f.formats[c.GetNodeId()] = c.GetFormat()
	return &metapb.Result{}
}

// NodeFormat is nodeID's recorded log format, 0 if none is recorded.
func (f *FSM) NodeFormat(nodeID string) uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.formats[nodeID]
}

// NodeFormats lists every recorded log format, sorted by node id.
func (f *FSM) NodeFormats() []fsm.NodeFormat {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]fsm.NodeFormat, 0, len(f.formats))
	for id, n := range f.formats {
		out = append(out, fsm.NodeFormat{NodeID: id, Format: n})
	}
	slices.SortFunc(out, func(a, b fsm.NodeFormat) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// nodeFormatsLocked is the snapshot form of the record; f.mu is held.
func (f *FSM) nodeFormatsLocked() []*metapb.NodeFormat {
	out := make([]*metapb.NodeFormat, 0, len(f.formats))
	for id, n := range f.formats {
		out = append(out, &metapb.NodeFormat{NodeId: id, Format: n})
	}
	slices.SortFunc(out, func(a, b *metapb.NodeFormat) int { return strings.Compare(a.GetNodeId(), b.GetNodeId()) })
	return out
}

func formatsFromProto(in []*metapb.NodeFormat) map[string]uint32 {
	out := make(map[string]uint32, len(in))
	for _, n := range in {
		out[n.GetNodeId()] = n.GetFormat()
	}
	return out
}
