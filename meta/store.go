package meta

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/raftstore"
)

// Store is this node's member of the meta raft group: a local replica of
// the control-plane state plus the write path through the meta leader.
type Store struct {
	nodeID string
	raft   *raft.Raft
	closer io.Closer
	// replica is the group's checked stores (raftstore).
	replica *raftstore.Replica
	disk    *raftgroup.DiskWatch // nil in tests that build a Store by hand
	// stalled: a raft write of this replica is stuck (DiskWatch); it may
	// still be raft's leader, but cannot commit.
	stalled atomic.Bool
	fsm     *FSM
	now     func() time.Time
	logger  *slog.Logger

	mu     sync.Mutex
	subs   map[int]chan struct{}
	nextID int

	gate      *raftmux.Gate
	sideMu    sync.Mutex
	sidelines map[string]bool // reasons this replica must not lead
	sidelined atomic.Bool     // len(sidelines) > 0

	// kindFormat, if set, replaces CommandFormat: tests gate a kind on a
	// format no release has yet.
	kindFormat func(*metapb.Command) uint32

	stopped      chan struct{} // closed by Shutdown
	shutdownOnce sync.Once
	shutdownErr  error
}

// newStore wires a running raft.Raft whose FSM is f; the notify hook of f
// must call s.notify (see Open).
func newStore(nodeID string, r *raft.Raft, closer io.Closer, f *FSM, now func() time.Time, logger *slog.Logger) *Store {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Store{nodeID: nodeID, raft: r, closer: closer, fsm: f, now: now, logger: logger, subs: map[int]chan struct{}{}, stopped: make(chan struct{}),
		gate: &raftmux.Gate{}, sidelines: map[string]bool{}}
}

// notify wakes every subscriber without blocking; a pending wake-up already
// covers any later change (coalescing).
func (s *Store) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Changes returns a channel that receives (coalesced) after any meta change,
// including leadership changes seen by Notify, and a func that unsubscribes.
func (s *Store) Changes() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.subs[id] = ch
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}
}

// Raft exposes the meta raft group for membership changes by the cluster.
func (s *Store) Raft() *raft.Raft { return s.raft }

// FSM exposes the local replica.
func (s *Store) FSM() *FSM { return s.fsm }

// IsLeader reports whether this node leads the meta group and may act as
// its leader (it is not sidelined).
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader && !s.sidelined.Load() }

// LeaderID is the meta leader's node id as this node sees it ("" if none).
func (s *Store) LeaderID() string {
	_, id := s.raft.LeaderWithID()
	return string(id)
}

// HasState reports whether this node holds any meta raft state (it was
// bootstrapped or has joined): such a node must never bootstrap.
func (s *Store) HasState() bool {
	if s.raft.LastIndex() > 0 {
		return true
	}
	f := s.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// Incarnation names this node's meta replica (raftstore.ReplicaIdentity).
func (s *Store) Incarnation() string {
	if s.replica == nil {
		return ""
	}
	return s.replica.Identity().Incarnation
}

// Fresh reports whether this node's meta replica was created when it was
// opened (it has never been part of the group).
func (s *Store) Fresh() bool { return s.replica != nil && s.replica.Fresh() }

// Bootstrap starts the group with servers as its voters. Every initial node
// calls it with the identical list; raft.ErrCantBootstrap (state exists) is
// returned wrapped for the caller to treat as normal.
func (s *Store) Bootstrap(ctx context.Context, servers []raft.Server) error {
	f := s.raft.BootstrapCluster(raft.Configuration{Servers: servers})
	if err := raftgroup.WaitFuture(ctx, f, nil); err != nil {
		return fmt.Errorf("bootstrap meta: %w", err)
	}
	return nil
}

// Queue is a queue as the meta group records it. The server turns it into
// the public form (server/convert.go).
type Queue struct {
	Name      string
	Policy    *fsmpb.QueuePolicy // normalized
	CreatedMs int64              // Unix milliseconds
	Paused    bool               // PauseQueue: its shards lease nothing
}

// Queue returns one queue from the local replica.
func (s *Store) Queue(name string) (Queue, bool) {
	q, ok := s.fsm.Queue(name)
	if !ok {
		return Queue{}, false
	}
	return queueOf(q), true
}

// Queues returns every queue from the local replica, sorted by name.
func (s *Store) Queues() []Queue {
	qs := s.fsm.Queues()
	out := make([]Queue, len(qs))
	for i, q := range qs {
		out[i] = queueOf(q)
	}
	return out
}

// QueuePolicies returns name -> the policy shards enforce (ShardPolicy)
// from the local replica.
func (s *Store) QueuePolicies() map[string]*fsmpb.QueuePolicy {
	qs := s.fsm.Queues()
	tenants := map[string]*metapb.Tenant{}
	for _, t := range s.fsm.Tenants() {
		tenants[t.GetName()] = t
	}
	n := s.ShardMap().Count
	out := make(map[string]*fsmpb.QueuePolicy, len(qs))
	for _, q := range qs {
		out[q.GetName()] = shardPolicy(q, tenants[fsm.TenantOf(q.GetName())], n)
	}
	return out
}

func queueOf(q *metapb.Queue) Queue {
	return Queue{Name: q.GetName(), Policy: q.GetPolicy(), CreatedMs: q.GetCreatedMs(), Paused: q.GetPaused()}
}

// ShardMap returns the shard map from the local replica (Version 0: not yet
// placed).
func (s *Store) ShardMap() ShardMap { return shardMapFromProto(s.fsm.ShardMap()) }

// AppliedIndex is the last meta index applied locally.
func (s *Store) AppliedIndex() uint64 { return s.fsm.AppliedIndex() }

func normalize(name string, p *fsmpb.QueuePolicy) (*fsmpb.QueuePolicy, error) {
	if err := fsm.ValidateQueueName(name); err != nil {
		return nil, refused(ErrInvalid, "%s", fsmReason(err))
	}
	if p == nil {
		p = &fsmpb.QueuePolicy{}
	}
	if err := fsm.ValidatePolicy(p); err != nil {
		return nil, refused(ErrInvalid, "%s", fsmReason(err))
	}
	np := fsm.NormalizePolicy(p)
	// The pause travels beside the policy (PauseQueue), never in it.
	np.Paused = false
	return np, nil
}

// fsmReason is an fsm validation error without the sentinel's words, which
// RefusedError.Kind carries.
func fsmReason(err error) string {
	return strings.TrimPrefix(err.Error(), fsm.ErrInvalidArgument.Error()+": ")
}

// CreateQueue creates a queue. Creating it again with the same (normalized)
// policy returns the existing queue; with a different one, ErrExists. A new
// name must also pass fsm.ValidateNewQueueName.
func (s *Store) CreateQueue(ctx context.Context, name string, p *fsmpb.QueuePolicy) (Queue, error) {
	np, err := normalize(name, p)
	if err == nil {
		if verr := fsm.ValidateNewQueueName(name); verr != nil {
			if _, ok := s.fsm.Queue(name); !ok {
				err = refused(ErrInvalid, "%s", fsmReason(verr))
			}
		}
	}
	if err != nil {
		return Queue{}, fmt.Errorf("create queue %q: %w", name, err)
	}
	res, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_CreateQueue{CreateQueue: &metapb.CreateQueue{Name: name, Policy: np}}})
	if err != nil {
		return Queue{}, fmt.Errorf("create queue %q: %w", name, err)
	}
	return queueOf(res.GetQueue()), nil
}

// UpdateQueue replaces a queue's policy; ErrNotFound if there is no queue.
// A queue's mode (standard or FIFO) is fixed when it is created: an update
// that changes it is refused with ErrInvalid. Every shard's FSM refuses a
// mode change while it holds messages of the queue (their indexes are
// built for one mode), so a change recorded here would leave the shards
// and the meta group disagreeing about the queue.
func (s *Store) UpdateQueue(ctx context.Context, name string, p *fsmpb.QueuePolicy) (Queue, error) {
	np, err := normalize(name, p)
	if err != nil {
		return Queue{}, fmt.Errorf("update queue %q: %w", name, err)
	}
	// Checked on the leader only, whose replica has applied every write it
	// acknowledged; a follower forwards the update there (ErrNotLeader).
	if cur, ok := s.fsm.Queue(name); ok && s.IsLeader() && cur.GetPolicy().GetMode() != np.GetMode() {
		return Queue{}, fmt.Errorf("update queue %q: %w", name, refused(ErrInvalid,
			"queue %q is %s and a queue's mode cannot change; create a new queue for %s delivery",
			name, modeWord(cur.GetPolicy().GetMode()), modeWord(np.GetMode())))
	}
	res, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_UpdateQueue{UpdateQueue: &metapb.UpdateQueue{Name: name, Policy: np}}})
	if err != nil {
		return Queue{}, fmt.Errorf("update queue %q: %w", name, err)
	}
	return queueOf(res.GetQueue()), nil
}

func modeWord(m fsmpb.QueueMode) string {
	if m == fsmpb.QueueMode_QUEUE_MODE_FIFO {
		return "FIFO"
	}
	return "standard"
}

// DeleteQueue removes a queue; ErrNotFound if there is none.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_DeleteQueue{DeleteQueue: &metapb.DeleteQueue{Name: name}}}); err != nil {
		return fmt.Errorf("delete queue %q: %w", name, err)
	}
	return nil
}

// PlaceShards writes the shard map once: count shards, replication replicas
// each, placed by Place over the current voters of the meta group (the
// bootstrap voters) at their configured raft addresses. ErrAlreadyPlaced if
// a map exists.
func (s *Store) PlaceShards(ctx context.Context, count uint32, replication int) (ShardMap, error) {
	voters, addrs, err := s.placementVoters()
	if err != nil {
		return ShardMap{}, fmt.Errorf("place shards: %w", err)
	}
	cmd := placeCommand(count, Place(count, replication, voters), addrs, newClusterID())
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_PlaceShards{PlaceShards: cmd}}); err != nil {
		return ShardMap{}, fmt.Errorf("place shards: %w", err)
	}
	return s.ShardMap(), nil
}

// placementVoters is what a first placement places over: the meta group's
// voters, sorted by id, and their raft addresses.
func (s *Store) placementVoters() ([]string, map[string]string, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, nil, fmt.Errorf("configuration: %w", err)
	}
	var voters []string
	addrs := map[string]string{}
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			voters = append(voters, string(srv.ID))
			addrs[string(srv.ID)] = string(srv.Address)
		}
	}
	if len(voters) == 0 {
		return nil, nil, errors.New("no voters in the meta configuration")
	}
	slices.Sort(voters)
	return voters, addrs, nil
}

// newClusterID is a random cluster name, fixed by the first placement.
func newClusterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b[:])
}

// notLeader names the leader as this replica sees it, except itself: a
// sidelined leader is handing leadership away (its clock may be the
// reason, so it stamps nothing), and naming itself would send the caller
// straight back.
func (s *Store) notLeader() error {
	id := s.LeaderID()
	if id == s.nodeID {
		id = ""
	}
	return &raftgroup.NotLeaderError{Group: "meta", LeaderID: id}
}

// apply proposes cmd through the meta leader and maps the FSM's result code
// to an error.
func (s *Store) apply(ctx context.Context, cmd *metapb.Command) (*metapb.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !s.IsLeader() {
		return nil, s.notLeader()
	}
	if s.stalled.Load() {
		return nil, &raftgroup.NotLeaderError{Group: "meta"} // raft names this replica, but it cannot write
	}
	if err := s.checkFormat(cmd); err != nil {
		return nil, err
	}
	cmd.Version = CommandVersion
	cmd.NowMs = s.now().UnixMilli()
	b, err := proto.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return nil, ctx.Err()
		}
	}
	f := s.raft.ApplyLog(raftstore.Command(b), timeout)
	if err := raftgroup.WaitFuture(ctx, f, nil); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			// Refused before it reached the log: certainly not applied.
			return nil, fmt.Errorf("%w: %w", s.notLeader(), err)
		}
		if errors.Is(err, raft.ErrLeadershipLost) {
			// Appended by a leader that stepped down: a new leader may
			// still commit it. Report it as unknown, not as a refusal, so
			// nobody is told "nothing happened" (a retried delete would
			// otherwise answer NotFound for a delete that took effect).
			return nil, fmt.Errorf("%w: meta: %w", raftgroup.ErrUnknownResult, err)
		}
		return nil, err
	}
	res, ok := f.Response().(*metapb.Result)
	if !ok {
		return nil, fmt.Errorf("unexpected apply response %T", f.Response())
	}
	switch res.GetCode() {
	case metapb.Code_CODE_OK:
		return res, nil
	case metapb.Code_CODE_EXISTS:
		return res, refused(ErrExists, "%s", res.GetMessage())
	case metapb.Code_CODE_NOT_FOUND:
		return res, refused(ErrNotFound, "%s", res.GetMessage())
	case metapb.Code_CODE_ALREADY_PLACED:
		return res, refused(ErrAlreadyPlaced, "%s", res.GetMessage())
	case metapb.Code_CODE_REFUSED:
		return res, refused(ErrRefused, "%s", res.GetMessage())
	case metapb.Code_CODE_QUOTA:
		return res, refused(ErrQuota, "%s", res.GetMessage())
	default:
		return res, refused(ErrInvalid, "%s", res.GetMessage())
	}
}

// TransferLeadership hands meta leadership to another voter if this node
// leads, waiting at most until ctx ends.
func (s *Store) TransferLeadership(ctx context.Context) error {
	if !s.IsLeader() {
		return nil
	}
	if err := raftgroup.WaitFuture(ctx, s.raft.LeadershipTransfer(), nil); err != nil {
		return fmt.Errorf("meta leadership transfer: %w", err)
	}
	return nil
}

// Shutdown stops the meta raft group and closes its stores.
func (s *Store) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() {
		// A stable-store write waiting for space would hold raft's shutdown.
		_ = s.disk.Close()
		err := raftgroup.WaitFuture(ctx, s.raft.Shutdown(), nil)
		close(s.stopped)
		if s.closer != nil {
			if cerr := s.closer.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
		if err != nil {
			s.shutdownErr = fmt.Errorf("meta shutdown: %w", err)
		}
	})
	return s.shutdownErr
}

// DiskStats reports the meta replica's raft store writes; ok is false for
// a Store without a disk watch.
func (s *Store) DiskStats() (st raftgroup.DiskStats, ok bool) {
	if s.disk == nil {
		return raftgroup.DiskStats{}, false
	}
	return s.disk.Stats(), true
}
