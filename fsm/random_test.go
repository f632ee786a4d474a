package fsm

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
)

// TestRandomizedInvariants applies thousands of random command sequences
// (valid and invalid) and checks after every entry that the invariants hold,
// that FIFO groups deliver in order, that snapshot -> restore reproduces the
// digest, and that replaying the same log on a fresh replica does too.
func TestRandomizedInvariants(t *testing.T) {
	seqs, entries := 2000, 40
	if testing.Short() {
		seqs = 300
	}
	var deliveries, replayed uint64
	for i := 0; i < seqs; i++ {
		seed := uint64(i)
		r, err := runRandom(seed, entries)
		if err != nil {
			t.Fatalf("seed %d (rerun with runRandom(%d, %d)): %v", seed, seed, entries, err)
		}
		deliveries += r.deliveries
		replayed += r.replayed
	}
	// The sequences must reach fan-out, or the checks above say nothing
	// about it.
	if deliveries == 0 || replayed == 0 {
		t.Fatalf("%d copies published and %d replayed over every sequence", deliveries, replayed)
	}
}

type randomRun struct {
	rng      *rand.Rand
	f        *FSM
	index    uint64
	term     uint64
	now      int64
	logs     []*raft.Log
	receipts []*fsmpb.Receipt
	ids      []uint64
	lastSeq  map[string]uint64 // FIFO queue/group -> seq of the last delivery
	// The slot moves as the commands left them: sealed slot -> move, and
	// queue/group -> moves holding it.
	seals     map[uint32]uint64
	slotCount uint32
	holds     map[string]map[uint64]bool
	// paused: the queues whose last applied upsert paused them.
	paused map[string]bool
	// deliveries and replayed count the copies topics made (topics.go).
	deliveries, replayed uint64
}

// tp and tpf are topics (standard, FIFO); sub, subf and subxf their
// subscriptions, subxf with a filter (topics.go).
var randomQueues = []string{"s", "f", "d", "t/s", "t/f", "tp", "tpf", "sub", "subf", "subxf"}

func runRandom(seed uint64, entries int) (*randomRun, error) {
	r := &randomRun{rng: rand.New(rand.NewPCG(seed, 0x5eed)), f: New(Options{}), term: 1, now: t0, lastSeq: map[string]uint64{},
		seals: map[uint32]uint64{}, holds: map[string]map[uint64]bool{}, paused: map[string]bool{}}
	for e := 0; e < entries; e++ {
		if err := r.step(); err != nil {
			return nil, fmt.Errorf("entry %d: %w", e, err)
		}
		if e%10 == 9 || e == entries-1 {
			if err := roundTrip(r.f); err != nil {
				return nil, fmt.Errorf("entry %d: %w", e, err)
			}
		}
	}
	replica := New(Options{})
	replica.ApplyBatch(r.logs)
	d1, i1, err1 := r.f.Digest()
	d2, i2, err2 := replica.Digest()
	if err1 != nil || err2 != nil || d1 != d2 || i1 != i2 {
		return nil, fmt.Errorf("replay diverged: %x@%d vs %x@%d (%v, %v)", d1, i1, d2, i2, err1, err2)
	}
	return r, nil
}

// snapshotCopy is a new FSM restored from a snapshot of f.
func snapshotCopy(f *FSM) (*FSM, error) {
	snap, err := f.Snapshot()
	if err != nil {
		return nil, err
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		return nil, err
	}
	g := New(Options{})
	if err := g.Restore(sink); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	return g, nil
}

func roundTrip(f *FSM) error {
	want, idx, err := f.Digest()
	if err != nil {
		return err
	}
	g, err := snapshotCopy(f)
	if err != nil {
		return err
	}
	got, gidx, err := g.Digest()
	if err != nil || got != want || gidx != idx {
		return fmt.Errorf("restore digest %x@%d, want %x@%d (%v)", got, gidx, want, idx, err)
	}
	if err := checkInvariants(g); err != nil {
		return fmt.Errorf("restored: %w", err)
	}
	return nil
}

func (r *randomRun) step() error {
	switch r.rng.IntN(10) {
	case 0, 1, 2:
	case 3, 4, 5:
		r.now += int64(r.rng.IntN(300))
	case 6, 7, 8:
		r.now += int64(r.rng.IntN(3000))
	default:
		r.now -= int64(r.rng.IntN(500)) // a leader behind in time
	}
	if r.rng.IntN(20) == 0 {
		r.term++
	}
	n := 1 + r.rng.IntN(4)
	cmds := make([]*fsmpb.Command, n)
	for i := range cmds {
		cmds[i] = r.command()
	}
	r.index++
	data, err := EncodeEntry(&fsmpb.Entry{Version: EntryVersion, NowMs: r.now, Seed: r.rng.Uint64(), Commands: cmds})
	if err != nil {
		return err
	}
	l := makeLog(r.index, r.term, data)
	r.logs = append(r.logs, l)
	resp := r.f.Apply(l).(*Response)
	for i, res := range resp.Results {
		if err := r.model(cmds[i], res); err != nil {
			return fmt.Errorf("command %d (%s): %w", i, KindName(cmds[i]), err)
		}
		if u := cmds[i].GetUpsertQueue(); u != nil && u.GetPolicy().GetReplayFromMs() > 0 {
			r.replayed += res.GetCount().GetCount()
		}
		for _, it := range res.GetEnqueue().GetItems() {
			r.deliveries += uint64(it.GetDeliveries())
			if it.GetMessageId() != 0 {
				r.ids = append(r.ids, it.GetMessageId())
			}
		}
		for _, m := range res.GetReceive().GetMessages() {
			r.receipts = append(r.receipts, receipt(m))
			if p, ok := r.f.Queues()[m.GetQueue()]; ok && p.GetMode() == fsmpb.QueueMode_QUEUE_MODE_FIFO {
				g := m.GetQueue() + "\x00" + m.GetGroupId()
				if last := r.lastSeq[g]; m.GetSeq() < last {
					return fmt.Errorf("group %q delivered seq %d after %d", g, m.GetSeq(), last)
				}
				r.lastSeq[g] = m.GetSeq()
			}
		}
	}
	if err := r.checkHolds(); err != nil {
		return err
	}
	return checkInvariants(r.f)
}

// model follows seals and holds through one command's result, and checks
// that no item of a sealed slot went in, none of another slot was refused
// for one, and no held FIFO group was leased.
func (r *randomRun) model(c *fsmpb.Command, res *fsmpb.Result) error {
	ok := res.GetStatus().GetCode() == fsmpb.Code_CODE_OK
	switch c := c.GetCmd().(type) {
	case *fsmpb.Command_SealSlots:
		if ok {
			r.slotCount = c.SealSlots.GetSlotCount()
			for _, s := range c.SealSlots.GetSlots() {
				r.seals[s] = c.SealSlots.GetMoveId()
			}
		}
	case *fsmpb.Command_UnsealSlots:
		for s, m := range r.seals {
			if m == c.UnsealSlots.GetMoveId() {
				delete(r.seals, s)
			}
		}
	case *fsmpb.Command_HoldGroups:
		if ok {
			for _, it := range c.HoldGroups.GetItems() {
				k := it.GetQueue() + "\x00" + it.GetGroup()
				if r.holds[k] == nil {
					r.holds[k] = map[uint64]bool{}
				}
				r.holds[k][c.HoldGroups.GetMoveId()] = true
			}
		}
	case *fsmpb.Command_ReleaseGroups:
		if ok {
			rel := c.ReleaseGroups
			for k, moves := range r.holds {
				for _, it := range rel.GetItems() {
					if k == it.GetQueue()+"\x00"+it.GetGroup() {
						delete(moves, rel.GetMoveId())
					}
				}
				if rel.GetAll() {
					delete(moves, rel.GetMoveId())
				}
				if len(moves) == 0 {
					delete(r.holds, k)
				}
			}
		}
	case *fsmpb.Command_UpsertQueue:
		if ok {
			r.paused[c.UpsertQueue.GetQueue()] = c.UpsertQueue.GetPolicy().GetPaused()
		}
	case *fsmpb.Command_DeleteQueue:
		if ok {
			delete(r.paused, c.DeleteQueue.GetQueue())
			for k := range r.holds {
				if strings.HasPrefix(k, c.DeleteQueue.GetQueue()+"\x00") {
					delete(r.holds, k)
				}
			}
		}
	case *fsmpb.Command_Enqueue:
		for k, it := range res.GetEnqueue().GetItems() {
			nm := c.Enqueue.GetMessages()[k]
			slot, keyed := wire.SlotForMessage(c.Enqueue.GetQueue(), nm.GetGroupId(), nm.GetDedupKey(), r.slotCount)
			_, sealed := r.seals[slot]
			sealed = sealed && keyed && len(r.seals) > 0
			switch code := it.GetStatus().GetCode(); {
			case code == fsmpb.Code_CODE_SLOT_MOVED && !sealed:
				return fmt.Errorf("item %d refused as moved, its slot %d (keyed %v) is not sealed", k, slot, keyed)
			case code == fsmpb.Code_CODE_OK && sealed && !it.GetDeduplicated():
				return fmt.Errorf("item %d of sealed slot %d went in as message %d", k, slot, it.GetMessageId())
			}
		}
	case *fsmpb.Command_Receive:
		if n := len(res.GetReceive().GetMessages()); n > 0 && r.paused[c.Receive.GetQueue()] {
			return fmt.Errorf("paused queue %s leased %d message(s)", c.Receive.GetQueue(), n)
		}
		fifo := r.f.Queues()[c.Receive.GetQueue()].GetMode() == fsmpb.QueueMode_QUEUE_MODE_FIFO
		for _, m := range res.GetReceive().GetMessages() {
			if k := m.GetQueue() + "\x00" + m.GetGroupId(); fifo && len(r.holds[k]) > 0 {
				return fmt.Errorf("message %d of held group %s leased", m.GetId(), k)
			}
		}
	}
	if len(r.seals) == 0 {
		r.slotCount = 0
	}
	return nil
}

// checkHolds compares the FSM's holds with the model's.
func (r *randomRun) checkHolds() error {
	n := 0
	for k := range r.holds {
		q, g, _ := strings.Cut(k, "\x00")
		if !r.f.IsHeld(q, g) {
			return fmt.Errorf("group %s not held, the model holds it by %v", k, r.holds[k])
		}
		n += len(r.holds[k])
	}
	got := 0
	for _, h := range r.f.Holds() {
		got += h.Groups
	}
	if got != n {
		return fmt.Errorf("%d holds, the model has %d", got, n)
	}
	count, seals := r.f.Seals()
	if len(seals) != len(r.seals) || count != r.slotCount {
		return fmt.Errorf("%d seals of %d slots, the model has %d of %d", len(seals), count, len(r.seals), r.slotCount)
	}
	for _, s := range seals {
		if r.seals[s.Slot] != s.MoveID {
			return fmt.Errorf("slot %d sealed by move %d, the model says %d", s.Slot, s.MoveID, r.seals[s.Slot])
		}
	}
	return nil
}

// randomSlots are the slots, at randomSlotCount, of the groups and keys the
// random messages use, so that seals hit them.
var randomSlots = func() []uint32 {
	var out []uint32
	for _, q := range randomQueues {
		for i := 0; i < 5; i++ {
			for _, gk := range [][2]string{{fmt.Sprint("g", i), ""}, {"", fmt.Sprint("k", i)}} {
				s, _ := wire.SlotForMessage(q, gk[0], gk[1], randomSlotCount)
				out = append(out, s)
			}
		}
	}
	return out
}()

const randomSlotCount = 4 * wire.SlotsPerShard

func (r *randomRun) slotMove() *fsmpb.Command {
	move := uint64(1 + r.rng.IntN(3))
	switch r.rng.IntN(8) {
	case 0, 1, 2:
		count := uint32(randomSlotCount)
		if r.rng.IntN(15) == 0 {
			count = [...]uint32{0, 300, 8 * wire.SlotsPerShard}[r.rng.IntN(3)] // invalid, or another count
		}
		slots := make([]uint32, 1+r.rng.IntN(4))
		for i := range slots {
			slots[i] = randomSlots[r.rng.IntN(len(randomSlots))]
		}
		return sealCmd(move, uint32(r.rng.IntN(4)), count, slots...)
	case 3:
		return unsealCmd(move)
	case 4, 5:
		items := make([]*fsmpb.QueueGroup, 1+r.rng.IntN(3))
		for i := range items {
			items[i] = qg(r.queue(), fmt.Sprint("g", r.rng.IntN(4)))
		}
		return holdCmd(move, uint32(r.rng.IntN(4)), items...)
	default:
		if r.rng.IntN(3) == 0 {
			return releaseCmd(move, true)
		}
		items := make([]*fsmpb.QueueGroup, 1+r.rng.IntN(3))
		for i := range items {
			items[i] = qg(r.queue(), fmt.Sprint("g", r.rng.IntN(4)))
		}
		return releaseCmd(move, false, items...)
	}
}

func (r *randomRun) queue() string {
	if r.rng.IntN(30) == 0 {
		return "missing"
	}
	return randomQueues[r.rng.IntN(len(randomQueues))]
}

func (r *randomRun) receiptPick() *fsmpb.Receipt {
	if len(r.receipts) == 0 || r.rng.IntN(15) == 0 {
		return &fsmpb.Receipt{MessageId: uint64(r.rng.IntN(50)), LeaseEpoch: uint64(r.rng.IntN(50))}
	}
	// Favour recent receipts, which are more often live.
	k := len(r.receipts) - 1 - r.rng.IntN(min(len(r.receipts), 8))
	if r.rng.IntN(4) == 0 {
		k = r.rng.IntN(len(r.receipts))
	}
	return r.receipts[k]
}

func (r *randomRun) idPick() uint64 {
	if len(r.ids) == 0 || r.rng.IntN(10) == 0 {
		return uint64(r.rng.IntN(60))
	}
	return r.ids[r.rng.IntN(len(r.ids))]
}

func (r *randomRun) policy(q string) *fsmpb.QueuePolicy {
	p := &fsmpb.QueuePolicy{
		VisibilityTimeoutMs:  int64(100 + r.rng.IntN(3000)),
		MaxReceiveCount:      uint32(1 + r.rng.IntN(4)),
		BackoffBaseMs:        int64(r.rng.IntN(200)),
		BackoffMaxMs:         int64(r.rng.IntN(2000)),
		DedupWindowMs:        int64(r.rng.IntN(5000)),
		RetentionMs:          int64(r.rng.IntN(30_000)),
		DelayMs:              int64(r.rng.IntN(2) * r.rng.IntN(1000)),
		CompletedRetentionMs: int64(r.rng.IntN(5000)),
		DlqDisabled:          q == "d",
	}
	if strings.HasSuffix(q, "f") {
		p.Mode = fsmpb.QueueMode_QUEUE_MODE_FIFO
	}
	if TenantOf(q) != "" && r.rng.IntN(2) == 0 { // small enough to be reached
		p.ShardQuota = &fsmpb.ShardQuota{
			MaxMessages: uint64(r.rng.IntN(10)), MaxInFlight: uint64(r.rng.IntN(4)),
			TenantMaxMessages: uint64(r.rng.IntN(15)), TenantMaxBytes: uint64(r.rng.IntN(2) * r.rng.IntN(60)),
			TenantMaxInFlight: uint64(r.rng.IntN(5)),
		}
	}
	// A pause now and then, lifted by the queue's next upsert
	// (fsm/pause.go): receives meanwhile must lease nothing.
	p.Paused = r.rng.IntN(6) == 0
	if r.rng.IntN(40) == 0 {
		p.Mode = fsmpb.QueueMode(r.rng.IntN(4)) // mode change or an invalid mode
	}
	if r.rng.IntN(40) == 0 {
		p.VisibilityTimeoutMs = -1
	}
	switch q {
	case "tp", "tpf":
		p.Topic = true
		p.TopicRetentionMs = int64(r.rng.IntN(3) * r.rng.IntN(20_000))
	case "sub":
		p.SubscriptionOf = "tp"
	case "subf", "subxf":
		p.SubscriptionOf = "tpf"
		if q == "subxf" {
			p.Filter = "group ^= g and group != g2"
		}
		if r.rng.IntN(3) == 0 {
			p.ReplayFromMs = 1 + int64(r.rng.IntN(2))*(r.now-int64(r.rng.IntN(5000)))
		}
	}
	if r.rng.IntN(2) == 0 { // small enough that acks with results reach it
		p.CompletedMaxBytesPerShard = MaxResultBytes
	}
	if r.rng.IntN(3) == 0 { // short enough that dead messages expire
		p.DeadRetentionMs = int64(r.rng.IntN(20_000))
	}
	if r.rng.IntN(3) == 0 { // small enough that sends hit them
		p.MaxMessagesPerShard = uint64(r.rng.IntN(12))
		p.MaxMessageBytes = 8
		p.MaxBytesPerShard = uint64(r.rng.IntN(2) * (8 + r.rng.IntN(30)))
	}
	return p
}

func (r *randomRun) newMessage() *fsmpb.NewMessage {
	m := &fsmpb.NewMessage{
		Body:     []byte(fmt.Sprint(r.rng.IntN(1000))),
		Priority: uint32(r.rng.IntN(11)), // 10 is invalid
		GroupId:  fmt.Sprint("g", r.rng.IntN(4)),
	}
	if r.rng.IntN(6) == 0 {
		m.GroupId = ""
	}
	if r.rng.IntN(3) == 0 {
		m.DedupKey = fmt.Sprint("k", r.rng.IntN(5))
		switch r.rng.IntN(4) { // unique jobs (unique.go)
		case 0:
			m.UniqueUntilDone = true
		case 1:
			m.UniqueUntilDone = true
			m.UniqueForMs = int64(r.rng.IntN(3000))
		case 2:
			m.UniqueForMs = int64(r.rng.IntN(3000))
		}
	}
	switch r.rng.IntN(6) {
	case 0:
		m.DelayMs = int64(r.rng.IntN(3000))
	case 1:
		m.DelayMs = -1
	case 2:
		m.RunAtMs = r.now + int64(r.rng.IntN(4000)) - 1000
	case 3:
		if r.rng.IntN(10) == 0 {
			m.DelayMs = -7
		}
	}
	if r.rng.IntN(5) == 0 {
		m.Attributes = map[string]string{"b": "2", "a": fmt.Sprint(r.rng.IntN(9))}
	}
	if r.rng.IntN(4) == 0 { // its own retry policy; 1001 is invalid
		m.MaxReceiveCount = uint32(r.rng.IntN(4)) + uint32(r.rng.IntN(30)/29)*1000
		m.BackoffBaseMs = int64(r.rng.IntN(300))
		m.BackoffMaxMs = int64(r.rng.IntN(1000))
	}
	return m
}

func (r *randomRun) command() *fsmpb.Command {
	switch r.rng.IntN(28) {
	case 0:
		q := r.queue()
		return upsertCmd(q, r.policy(q))
	case 1:
		if r.rng.IntN(8) == 0 {
			return deleteCmd(r.queue())
		}
		return purgeCmd(r.queue())
	case 2, 3, 4, 5, 6:
		ms := make([]*fsmpb.NewMessage, 1+r.rng.IntN(5))
		for i := range ms {
			ms[i] = r.newMessage()
		}
		return enqueueCmd(r.queue(), ms...)
	case 7, 8, 9, 10:
		vis := int64(0)
		if r.rng.IntN(2) == 0 {
			vis = int64(50 + r.rng.IntN(3000))
		}
		return receiveCmd(r.queue(), uint32(r.rng.IntN(6)), vis)
	case 11, 12, 13:
		rs := make([]*fsmpb.Receipt, 1+r.rng.IntN(3))
		for i := range rs {
			rs[i] = r.receiptPick()
		}
		c := ackCmd(rs...)
		if r.rng.IntN(2) == 0 { // with results, some large enough to evict
			res := make([][]byte, len(rs))
			for i := range res {
				// Empty, or large enough that two pass a 64 KiB bound;
				// now and then one above the limit (refused).
				res[i] = make([]byte, r.rng.IntN(2)*(20_000+r.rng.IntN(MaxResultBytes-20_000+20)))
			}
			c.GetAck().Results = res
		}
		return c
	case 14, 15:
		if r.rng.IntN(2) == 0 {
			return nackCmd(nackBackoff(r.receiptPick(), "err"))
		}
		return nackCmd(nackDelay(r.receiptPick(), int64(r.rng.IntN(2000))-100, "err"))
	case 16, 17:
		return extendCmd(r.receiptPick(), int64(r.rng.IntN(3000))-200)
	case 18:
		return deadLetterCmd(r.receiptPick(), "poison")
	case 19:
		if r.rng.IntN(2) == 0 {
			return redriveCmd(r.queue(), uint32(r.rng.IntN(4)))
		}
		return redriveCmd(r.queue(), 0, r.idPick(), r.idPick())
	case 20:
		if r.rng.IntN(2) == 0 {
			return discardCmd(r.queue(), uint32(r.rng.IntN(3)))
		}
		return discardCmd(r.queue(), 0, r.idPick())
	case 21:
		return cancelCmd(r.queue(), r.idPick(), r.idPick())
	case 22:
		return graceCmd(r.term+uint64(r.rng.IntN(2)), int64(r.rng.IntN(3000)))
	case 23, 24, 25:
		return r.slotMove()
	case 26:
		return snoozeCmd(snoozeItem(r.receiptPick(), int64(r.rng.IntN(2000))-100, "snoozed"))
	default:
		return tickCmd()
	}
}
