package fsm

import (
	"crypto/sha256"

	"github.com/google/btree"
	"github.com/raftq/raftq/fsm/fsmpb"
)

// btreeDegree trades node size against depth; 32 keeps nodes within a few
// cache lines for the 16-24 byte items used here.
const btreeDegree = 32

// msg is the in-memory record of one message. It is a compact struct rather
// than an fsmpb.Message because memory per queued message is the cost that
// matters at millions of messages; it is converted to fsmpb.Message on read
// and in snapshots.
//
// Records are copy-on-write across snapshots: a record whose gen is older
// than state.gen may be read by a snapshot being persisted, so it is copied
// (see state.own) before any change. body and attrs are never mutated after
// enqueue and are shared between copies.
type msg struct {
	id, seq         uint64
	q               *queue
	body            []byte
	publishedAs     uint64 // a topic's copy: the publication it is a copy of, whose body it shares (topics.go)
	attrs           []kv   // sorted by key
	typ             string
	group           string
	dedupKey        string
	lastError       string
	enqueuedMs      int64
	availableMs     int64
	firstReceivedMs int64
	lastReceivedMs  int64
	stateChangedMs  int64
	expireMs        int64
	leaseEpoch      uint64
	leaseDeadline   int64
	leaseTerm       uint64
	gen             uint64
	receiveCount    uint32
	priority        uint8
	uniqueUntilDone bool // its dedup key is released when it leaves the live states (unique.go)
	state           fsmpb.State
	deadReason      fsmpb.Reason
	history         []attempt
	result          []byte       // acked: the ack's result (results.go)
	retry           *retryPolicy // nil: the queue's (retry.go)
}

type kv struct{ k, v string }

type attempt struct {
	epoch      uint64
	receivedMs int64
	endedMs    int64
	outcome    fsmpb.Reason
	err        string
	consumer   string
}

// Index items. Indexes hold ids, not *msg, so a copy-on-write record only has
// to be swapped in byID.
type timeItem struct {
	t  int64
	id uint64
}

func lessTime(a, b timeItem) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.id < b.id
}

// readyItem orders a queue's ready messages: higher priority first, then
// enqueue sequence. FIFO queues put priority 0 in every item.
type readyItem struct {
	key uint64 // (MaxPriority-priority)<<56 | seq
	id  uint64
}

func lessReady(a, b readyItem) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.id < b.id
}

func readyKey(m *msg) uint64 {
	p := uint64(0)
	if m.q.policy.GetMode() != fsmpb.QueueMode_QUEUE_MODE_FIFO {
		p = uint64(m.priority)
	}
	return (MaxPriority-p)<<56 | m.seq
}

// groupItem orders the live messages of a FIFO queue by group, then enqueue
// sequence: the first item of a group is its head.
type groupItem struct {
	group string
	seq   uint64
	id    uint64
}

func lessGroup(a, b groupItem) bool {
	if a.group != b.group {
		return a.group < b.group
	}
	if a.seq != b.seq {
		return a.seq < b.seq
	}
	return a.id < b.id
}

// dedupHash identifies a dedup key of a queue: the first 16 bytes of
// SHA-256(queue name, 0, key). A hash instead of the
// strings keeps the index small and free of pointers (the garbage
// collector never scans it): with every Go-client send carrying a key, the
// index holds every message of the last dedup window, and as strings it
// was the largest FSM cost and most of the heap. At 128 bits an accidental
// collision is as likely as a UUID collision, and SHA-256 makes a crafted
// one infeasible.
type dedupHash [16]byte

func hashDedup(queue, key string) dedupHash {
	// One stack buffer and Sum256: every replica hashes every keyed
	// enqueue, and the streaming hasher cost 3 allocations each. Longer
	// inputs than the limits allow (only restore of a bad snapshot) spill
	// to the heap and still hash correctly.
	var buf [MaxQueueNameLen + 1 + MaxDedupKeyLen]byte
	in := append(buf[:0], queue...)
	in = append(in, 0) // names never hold a 0 byte: this ends it
	in = append(in, key...)
	sum := sha256.Sum256(in)
	return dedupHash(sum[:16])
}

// dedupRef is what the dedup index keeps per key: the message the key was
// first enqueued as, and when the key expires.
type dedupRef struct {
	id       uint64
	expireMs int64
}

// dedupExpiry is one live dedup key, ordered by (expiry, message id): a
// message has at most one key, so the pair is unique, and it is the same
// on every replica. This tree is the source of truth for snapshots; the
// map is the look-up index.
type dedupExpiry struct {
	t  int64
	id uint64
	h  dedupHash
}

func lessDedupExpiry(a, b dedupExpiry) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.id < b.id
}

// msgRef is byID's item: the id is inline so a look-up probe is a plain
// value (a *msg probe would be a heap allocation per look-up).
type msgRef struct {
	id uint64
	m  *msg
}

func lessMsg(a, b msgRef) bool { return a.id < b.id }

func lessID(a, b uint64) bool { return a < b }

// queue is one queue's state on this shard.
type queue struct {
	name   string
	policy *fsmpb.QueuePolicy // normalized
	// members holds every message id of the queue in any state, so DeleteQueue
	// and Purge cost the queue's size, not the shard's.
	members *btree.BTreeG[uint64]
	// ready holds what Receive may lease next: every ready message of a
	// standard queue; only the ready heads of FIFO groups.
	ready *btree.BTreeG[readyItem]
	// groups (FIFO only) holds ready, delayed and leased messages by group.
	groups    *btree.BTreeG[groupItem]
	groupSize map[string]uint32
	dead      *btree.BTreeG[timeItem] // (died ms, id)
	// firstID is the shard's next message id when the queue was created.
	// A deleted queue's dedup keys stay until they expire; those pointing
	// below firstID are an earlier queue's and are ignored.
	firstID uint64

	nReady, nDelayed, nLeased, nDead, nAcked uint64
	dropped                                  uint64
	// results holds the acked records with a result by (acked ms, id),
	// resultBytes the sum of their results, evicted the records dropped
	// to keep it within the queue's bound (results.go).
	results     *btree.BTreeG[timeItem]
	resultBytes uint64
	evicted     uint64
	deadExpired uint64 // discarded after dead_retention_ms
	// liveBytes is the sum of the bodies of ready, delayed and leased
	// messages: what max_bytes_per_shard limits.
	liveBytes uint64
	// tenant counts the queue's messages with its tenant's others (nil:
	// no tenant; quota.go).
	tenant *tenantUse
	// filter is a subscription's compiled policy filter (topics.go).
	filter *filter
}

// liveCount is what max_messages_per_shard limits.
func (q *queue) liveCount() uint64 { return q.nReady + q.nDelayed + q.nLeased }

func newQueue(name string, p *fsmpb.QueuePolicy) *queue {
	return &queue{
		name:      name,
		policy:    p,
		members:   btree.NewG(btreeDegree, lessID),
		ready:     btree.NewG(btreeDegree, lessReady),
		groups:    btree.NewG(btreeDegree, lessGroup),
		groupSize: map[string]uint32{},
		dead:      btree.NewG(btreeDegree, lessTime),
		results:   btree.NewG(btreeDegree, lessTime),
	}
}

func (q *queue) fifo() bool { return q.policy.GetMode() == fsmpb.QueueMode_QUEUE_MODE_FIFO }

// state is everything an FSM replicates. All iteration that affects results
// goes through ordered structures so replicas agree byte for byte.
type state struct {
	clock      int64
	applied    uint64
	nextID     uint64
	nextSeq    uint64
	leaseEpoch uint64
	graceTerm  uint64
	counters   *fsmpb.Counters
	// touched collects the queues that gained leasable messages while a batch
	// is applied, for Options.Notify; not replicated.
	touched map[string]struct{}
	// moves counts the moves of messages while a batch is applied, for
	// Options.Moves (moves.go); not replicated.
	moves map[moveKey]uint64

	queues map[string]*queue // iterated only in sorted order
	// subs: each topic's subscriptions by name (topics.go); derived from
	// queues, not written to snapshots.
	subs map[string][]*queue

	byID      *btree.BTreeG[msgRef]
	delayed   *btree.BTreeG[timeItem] // (available ms, id)
	leases    *btree.BTreeG[timeItem] // (deadline, id)
	retention *btree.BTreeG[timeItem] // ready and delayed: (expire ms, id)
	completed *btree.BTreeG[timeItem] // acked records: (expire ms, id)
	// results: the acked records with a result over every queue, by
	// (acked ms, id), and the sum of their results; resultCap bounds it
	// (results.go).
	results     *btree.BTreeG[timeItem]
	resultBytes uint64
	resultCap   uint64
	// deadExpiry: dead messages of queues with a dead retention, by
	// (death ms + retention, id) (deadretention.go).
	deadExpiry *btree.BTreeG[timeItem]

	// dedup maps live dedup keys to their message; it is only looked up by
	// key, never iterated (dedupindex.go).
	dedup       *dedupIndex
	dedupExpiry *btree.BTreeG[dedupExpiry] // every live dedup key

	// seals are the slots this shard refuses new keyed messages of, all
	// under one slot count (slots.go); holds are the FIFO groups it leases
	// none of (holds.go).
	slotCount uint32
	seals     map[uint32]slotSeal // iterated only where order cannot matter
	// tenants: the usage of each tenant with a queue here (quota.go),
	// only ever looked up by name.
	tenants map[string]*tenantUse
	holds   *btree.BTreeG[holdItem]

	// gen is bumped by every Snapshot; records with an older gen are shared
	// with a snapshot and must be copied before they change.
	gen uint64
}

func newState() *state {
	return &state{
		nextID:      1,
		nextSeq:     1,
		counters:    &fsmpb.Counters{},
		queues:      map[string]*queue{},
		byID:        btree.NewG(btreeDegree, lessMsg),
		delayed:     btree.NewG(btreeDegree, lessTime),
		leases:      btree.NewG(btreeDegree, lessTime),
		retention:   btree.NewG(btreeDegree, lessTime),
		completed:   btree.NewG(btreeDegree, lessTime),
		results:     btree.NewG(btreeDegree, lessTime),
		resultCap:   MaxResultBytesPerShard,
		deadExpiry:  btree.NewG(btreeDegree, lessTime),
		dedup:       newDedupIndex(),
		dedupExpiry: btree.NewG(btreeDegree, lessDedupExpiry),
		seals:       map[uint32]slotSeal{},
		holds:       btree.NewG(btreeDegree, lessHold),
		tenants:     map[string]*tenantUse{},
	}
}

func (s *state) get(id uint64) (*msg, bool) {
	r, ok := s.byID.Get(msgRef{id: id})
	return r.m, ok
}

// own returns a record that may be changed: m itself if no snapshot can see
// it, else a copy swapped into byID.
func (s *state) own(m *msg) *msg {
	if m.gen == s.gen {
		return m
	}
	c := *m
	c.gen = s.gen
	if m.history != nil {
		c.history = append([]attempt(nil), m.history...)
	}
	s.byID.ReplaceOrInsert(msgRef{c.id, &c})
	return &c
}
