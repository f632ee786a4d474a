package meta

import (
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta/metapb"
)

// CommandVersion is the Command format this FSM writes and applies.
const CommandVersion = 1

// FSM is the meta state machine. It implements raft.FSM.
type FSM struct {
	mu       sync.RWMutex
	applied  uint64
	queues   map[string]*metapb.Queue
	shardMap *metapb.ShardMap                // nil until placed
	formats  map[string]uint32               // node id -> recorded log format (NodeFormat)
	keys     map[string]*metapb.ApiKey       // by id (access.go)
	tenants  map[string]*metapb.Tenant       // by name (tenants.go)
	cron     map[string]*metapb.CronSchedule // by name (cron.go)
	// nextCron: the id the next schedule takes (0 means 1).
	nextCron uint64
	audit    []*metapb.AuditRecord // oldest first, at most MaxAudit
	// nextAudit: the seq the next audit record takes (0 means 1).
	nextAudit uint64

	// onChange runs after every applied command or restore, outside mu.
	onChange func()
}

// NewFSM returns an empty FSM; onChange (may be nil) is called after every
// state change and must not block.
func NewFSM(onChange func()) *FSM {
	return &FSM{queues: map[string]*metapb.Queue{}, formats: map[string]uint32{}, keys: map[string]*metapb.ApiKey{}, tenants: map[string]*metapb.Tenant{}, cron: map[string]*metapb.CronSchedule{}, onChange: onChange}
}

// Apply applies one log. Non-command logs and indexes at or below the last
// applied one change nothing, so a replay after restart is harmless.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	var cmd metapb.Command
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		// A log this replica cannot read means it would diverge: stop.
		panic(fmt.Sprintf("meta: decode command at index %d: %v", l.Index, err))
	}
	if cmd.GetVersion() != CommandVersion {
		panic(fmt.Sprintf("meta: command version %d at index %d not supported", cmd.GetVersion(), l.Index))
	}
	if nums, ignorable := fsm.UnknownKinds(&cmd); len(nums) > 0 && !ignorable {
		// A kind of a newer binary: the same rule as the shard FSM's
		// (fsm.IgnorableKindMin), checked before anything changes.
		panic(fsm.UnknownKindMessage("meta", l.Index, l.Term, cmd.ProtoReflect().Descriptor().FullName(), nums))
	}
	f.mu.Lock()
	if l.Index <= f.applied {
		f.mu.Unlock()
		return nil
	}
	res := f.applyLocked(&cmd)
	f.applied = l.Index
	f.mu.Unlock()
	f.changed()
	return res
}

func (f *FSM) changed() {
	if f.onChange != nil {
		f.onChange()
	}
}

func (f *FSM) applyLocked(cmd *metapb.Command) *metapb.Result {
	switch c := cmd.GetCmd().(type) {
	case *metapb.Command_CreateQueue:
		return f.createQueue(c.CreateQueue, cmd.GetNowMs())
	case *metapb.Command_UpdateQueue:
		return f.updateQueue(c.UpdateQueue, cmd.GetNowMs())
	case *metapb.Command_DeleteQueue:
		return f.deleteQueue(c.DeleteQueue)
	case *metapb.Command_PlaceShards:
		return f.placeShards(c.PlaceShards)
	case *metapb.Command_NodeFormat:
		return f.nodeFormat(c.NodeFormat)
	case *metapb.Command_MoveStep:
		return f.moveStep(c.MoveStep)
	case *metapb.Command_RetireNode:
		return f.retireNode(c.RetireNode)
	case *metapb.Command_DrainNode:
		return f.drainNode(c.DrainNode)
	case *metapb.Command_PreferLeader:
		return f.preferLeader(c.PreferLeader)
	case *metapb.Command_AbortMove:
		return f.abortMove(c.AbortMove)
	case *metapb.Command_GrowShards:
		return f.growShards(c.GrowShards)
	case *metapb.Command_SlotMoveStep:
		return f.slotMoveStep(c.SlotMoveStep, cmd.GetNowMs())
	case *metapb.Command_AbortSlotMove:
		return f.abortSlotMove(c.AbortSlotMove)
	case *metapb.Command_ForgetSlotMove:
		return f.forgetSlotMove(c.ForgetSlotMove, cmd.GetNowMs())
	case *metapb.Command_CreateApiKey:
		return f.createAPIKey(c.CreateApiKey, cmd.GetNowMs())
	case *metapb.Command_RotateApiKey:
		return f.rotateAPIKey(c.RotateApiKey, cmd.GetNowMs())
	case *metapb.Command_RevokeApiKey:
		return f.revokeAPIKey(c.RevokeApiKey)
	case *metapb.Command_AppendAudit:
		return f.appendAudit(c.AppendAudit)
	case *metapb.Command_PutTenant:
		return f.putTenant(c.PutTenant, cmd.GetNowMs())
	case *metapb.Command_DeleteTenant:
		return f.deleteTenant(c.DeleteTenant)
	case *metapb.Command_PauseQueue:
		return f.pauseQueue(c.PauseQueue, cmd.GetNowMs())
	case *metapb.Command_CreateCronSchedule:
		return f.createCronSchedule(c.CreateCronSchedule, cmd.GetNowMs())
	case *metapb.Command_SetCronPaused:
		return f.setCronPaused(c.SetCronPaused, cmd.GetNowMs())
	case *metapb.Command_DeleteCronSchedule:
		return f.deleteCronSchedule(c.DeleteCronSchedule)
	case *metapb.Command_TriggerCronSchedule:
		return f.triggerCronSchedule(c.TriggerCronSchedule)
	case *metapb.Command_RecordCronFire:
		return f.recordCronFire(c.RecordCronFire)
	default:
		if nums, _ := fsm.UnknownKinds(cmd); len(nums) > 0 {
			return &metapb.Result{} // ignorable kind of a newer binary (Apply stopped on any other)
		}
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "empty command"}
	}
}

func (f *FSM) createQueue(c *metapb.CreateQueue, nowMs int64) *metapb.Result {
	if c.GetName() == "" || c.GetPolicy() == nil {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "queue name and policy required"}
	}
	if q, ok := f.queues[c.GetName()]; ok {
		if proto.Equal(q.GetPolicy(), c.GetPolicy()) {
			return &metapb.Result{Queue: proto.CloneOf(q)}
		}
		return &metapb.Result{Code: metapb.Code_CODE_EXISTS, Message: fmt.Sprintf("queue %q exists with a different policy", c.GetName()), Queue: proto.CloneOf(q)}
	}
	if res := f.admitQueue(c.GetName()); res != nil {
		return res
	}
	if res := f.checkSubscription(c.GetName(), c.GetPolicy()); res != nil {
		return res
	}
	q := &metapb.Queue{Name: c.GetName(), Policy: proto.CloneOf(c.GetPolicy()), CreatedMs: nowMs, UpdatedMs: nowMs}
	f.queues[q.GetName()] = q
	return &metapb.Result{Queue: proto.CloneOf(q)}
}

func (f *FSM) updateQueue(c *metapb.UpdateQueue, nowMs int64) *metapb.Result {
	if c.GetPolicy() == nil {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "policy required"}
	}
	q, ok := f.queues[c.GetName()]
	if !ok {
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("queue %q not found", c.GetName())}
	}
	if res := checkFixedRoles(c.GetName(), q.GetPolicy(), c.GetPolicy()); res != nil {
		return res
	}
	if !proto.Equal(q.GetPolicy(), c.GetPolicy()) {
		// Replace rather than mutate: readers hold clones, never q itself,
		// but a fresh record keeps that rule obvious.
		// A pause is not part of the policy: an update keeps it.
		q = &metapb.Queue{Name: q.GetName(), Policy: proto.CloneOf(c.GetPolicy()), CreatedMs: q.GetCreatedMs(), UpdatedMs: nowMs, Paused: q.GetPaused()}
		f.queues[q.GetName()] = q
	}
	return &metapb.Result{Queue: proto.CloneOf(q)}
}

func (f *FSM) deleteQueue(c *metapb.DeleteQueue) *metapb.Result {
	if _, ok := f.queues[c.GetName()]; !ok {
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("queue %q not found", c.GetName())}
	}
	if res := f.checkTopicDelete(c.GetName()); res != nil {
		return res
	}
	delete(f.queues, c.GetName())
	return &metapb.Result{}
}

func (f *FSM) placeShards(c *metapb.PlaceShards) *metapb.Result {
	if f.shardMap != nil {
		return &metapb.Result{Code: metapb.Code_CODE_ALREADY_PLACED, Message: "shard map already placed"}
	}
	if c.GetCount() == 0 || len(c.GetShards()) != int(c.GetCount()) {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "shard map must list every shard once"}
	}
	seen := make(map[uint32]bool, len(c.GetShards()))
	for _, s := range c.GetShards() {
		if s.GetShard() >= c.GetCount() || seen[s.GetShard()] || len(s.GetNodes()) == 0 {
			return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("bad replicas for shard %d", s.GetShard())}
		}
		seen[s.GetShard()] = true
	}
	m := &metapb.ShardMap{
		Version:   1,
		Count:     c.GetCount(),
		Shards:    cloneAll(c.GetShards()),
		Nodes:     cloneAll(c.GetNodes()),
		ClusterId: c.GetClusterId(),
	}
	slices.SortFunc(m.Shards, func(a, b *metapb.ShardReplicas) int { return int(a.GetShard()) - int(b.GetShard()) })
	slices.SortFunc(m.Nodes, func(a, b *metapb.NodeAddr) int {
		switch {
		case a.GetNodeId() < b.GetNodeId():
			return -1
		case a.GetNodeId() > b.GetNodeId():
			return 1
		}
		return 0
	})
	f.shardMap = m
	return &metapb.Result{}
}

func cloneAll[T proto.Message](in []T) []T {
	out := make([]T, len(in))
	for i, m := range in {
		out[i] = proto.CloneOf(m)
	}
	return out
}

// AppliedIndex is the raft index of the last applied command.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Queue returns a copy of one queue.
func (f *FSM) Queue(name string) (*metapb.Queue, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.queues[name]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(q), true
}

// Queues returns copies of every queue, sorted by name.
func (f *FSM) Queues() []*metapb.Queue {
	f.mu.RLock()
	out := make([]*metapb.Queue, 0, len(f.queues))
	for _, q := range f.queues {
		out = append(out, proto.CloneOf(q))
	}
	f.mu.RUnlock()
	slices.SortFunc(out, func(a, b *metapb.Queue) int {
		switch {
		case a.GetName() < b.GetName():
			return -1
		case a.GetName() > b.GetName():
			return 1
		}
		return 0
	})
	return out
}

// ShardMap returns a copy of the shard map (nil until placed).
func (f *FSM) ShardMap() *metapb.ShardMap {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.shardMap == nil {
		return nil
	}
	return proto.CloneOf(f.shardMap)
}

// Snapshot captures the state; the meta state is small, so it is encoded
// here, under the read lock, and Persist only writes bytes.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	snap := f.snapshotProto()
	b, err := encodeSnapshot(snap)
	if err != nil {
		return nil, err
	}
	return &fsmSnapshot{data: b}, nil
}

func (f *FSM) snapshotProto() *metapb.Snapshot {
	snap := &metapb.Snapshot{Version: SnapshotVersion, Queues: f.Queues()}
	f.mu.RLock()
	snap.AppliedIndex = f.applied
	if f.shardMap != nil {
		snap.ShardMap = proto.CloneOf(f.shardMap)
	}
	snap.NodeFormats = f.nodeFormatsLocked()
	snap.ApiKeys = f.apiKeysLocked()
	snap.Audit = cloneAll(f.audit)
	snap.NextAuditSeq = f.nextAudit
	snap.Tenants = f.tenantsLocked()
	snap.CronSchedules = f.cronSchedulesLocked()
	snap.NextCronId = f.nextCron
	f.mu.RUnlock()
	return snap
}

// Restore replaces the state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	snap, err := decodeSnapshot(rc)
	if err != nil {
		return fmt.Errorf("meta restore: %w", err)
	}
	queues := make(map[string]*metapb.Queue, len(snap.GetQueues()))
	for _, q := range snap.GetQueues() {
		queues[q.GetName()] = q
	}
	f.mu.Lock()
	f.applied = snap.GetAppliedIndex()
	f.queues = queues
	f.shardMap = snap.GetShardMap()
	f.formats = formatsFromProto(snap.GetNodeFormats())
	f.keys = make(map[string]*metapb.ApiKey, len(snap.GetApiKeys()))
	for _, k := range snap.GetApiKeys() {
		f.keys[k.GetId()] = k
	}
	f.audit = snap.GetAudit()
	f.nextAudit = snap.GetNextAuditSeq()
	f.tenants = make(map[string]*metapb.Tenant, len(snap.GetTenants()))
	for _, t := range snap.GetTenants() {
		f.tenants[t.GetName()] = t
	}
	f.cron = cronFromProto(snap.GetCronSchedules())
	f.nextCron = snap.GetNextCronId()
	f.mu.Unlock()
	f.changed()
	return nil
}

type fsmSnapshot struct{ data []byte }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("meta snapshot write: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
