// Package checker judges a jepsen-lite history. Each checker reads only the
// history (client operations plus the server records fetched in the final
// phase), so a saved history can be re-checked offline. Time comparisons
// between leases use the shard's clock as the server reported it (lease
// deadlines, attempt times), never client wall clocks: the contract is
// stated on the shard clock, and client clocks would cry wolf.
package checker

import (
	"github.com/raftq/raftq/jepsen-lite/history"
)

// enqueue is everything the history says about one unique value.
type enqueue struct {
	value, queue, group, key string
	attempts                 int
	status                   string // best completion: ok > info > fail ("" if none)
	firstInvoke              int64
	lastOK                   int64 // completion time of the last ok attempt
	ids                      map[string]bool
}

// delivery is one message leased to a client, with the receive around it.
type delivery struct {
	history.Delivery
	queue           string
	process         int
	invoke, complet int64
	visMs           int64
}

// refusal is one RESOURCE_EXHAUSTED answer.
type refusal struct {
	f, queue, node, note, msg string
	process                   int
	complet                   int64
	retryMs                   int64
}

// codeExhausted is how the history spells RESOURCE_EXHAUSTED (the gRPC
// code's name, workload.Classify).
const codeExhausted = "ResourceExhausted"

// leaseOp is an ack, nack or extend and how it ended.
type leaseOp struct {
	f, typ          string
	msg             string
	epoch           uint64
	process         int
	invoke, complet int64
	deadlineMs      int64
	code            string
}

type index struct {
	enq        map[string]*enqueue // by value
	enqOrder   []*enqueue
	deliveries []delivery
	leaseOps   []leaseOp
	finals     map[string]*history.Record // by message id
	dead       map[string]bool            // message ids listed in a DLQ
	deadRecs   map[string]*history.Record // the DLQ listing's record, by message id
	msgValue   map[string]string          // message id -> value
	// msgQueue is the queue of each message id an ok enqueue or a
	// delivery names.
	msgQueue map[string]string
	// born is, per message id, the earliest completion of an ok enqueue
	// that returned it or of an ok receive that delivered it: the message
	// certainly existed from then on.
	born map[string]int64
	// refusals are the RESOURCE_EXHAUSTED completions, in order.
	refusals []refusal

	// setup is the run's configuration (nil: not in the history).
	setup *history.Setup
	// finalPhase is the phase "final" op: ok when the final phase
	// completed, fail when it could not (nil: none).
	finalPhase *history.Op
	// replicas is the final replica comparison (nil: none).
	replicas *history.Op
	// nemesis holds the fault operations in order.
	nemesis []history.Op

	// The fan-out workload's publishes (by value, and in order of their
	// first send), its topics and subscriptions (by name), the DLQ
	// listings of every queue in order, and the message ids a
	// DeadLetter call may have dead-lettered (ok or info).
	pubs         map[string]*publish
	pubOrder     []*publish
	subs         map[string]*subscription
	deadList     []deadEntry
	deadLettered map[string]bool
}

// publish is everything the history says about one published value.
// Its enqueue holds what a send's has: the topic as queue, the attempts,
// the best completion, the publication ids.
type publish struct {
	*enqueue
	typ   string
	attrs map[string]string
	// lastDone is the latest completion of any attempt; unsure: some
	// attempt's outcome is unknown (info, or no completion), so it may
	// have been applied at any time after its invoke.
	lastDone int64
	unsure   bool
	answers  []pubAnswer
}

// pubAnswer is one ok attempt of a publish.
type pubAnswer struct {
	invoke, done int64
	copies       uint32
	dedup        bool
}

// subscription is a topic or a subscription as its FSubscribe ops tell
// it: what was asked, when the first attempt was sent and when the
// first confirmed one completed.
type subscription struct {
	name        string
	spec        history.Subscription
	firstInvoke int64
	created     int64
	ok          bool
}

// isTopic: the entry creates a topic, not a subscription.
func (s *subscription) isTopic() bool { return s.name == s.spec.Topic }

// deadEntry is one message a DLQ listing returned.
type deadEntry struct {
	queue, id, value string
	rec              *history.Record
}

func rank(t string) int {
	switch t {
	case history.OK:
		return 3
	case history.Info:
		return 2
	case history.Fail:
		return 1
	}
	return 0
}

// build pairs invocations with completions per process; a process has at
// most one operation outstanding.
func build(ops []history.Op) *index {
	ix := &index{
		enq:      map[string]*enqueue{},
		finals:   map[string]*history.Record{},
		dead:     map[string]bool{},
		deadRecs: map[string]*history.Record{},
		msgValue: map[string]string{},
		msgQueue: map[string]string{},
		born:     map[string]int64{},

		pubs:         map[string]*publish{},
		subs:         map[string]*subscription{},
		deadLettered: map[string]bool{},
	}
	pending := map[int]history.Op{}
	for _, op := range ops {
		switch op.F {
		case history.FFinal:
			if op.Type == history.OK && op.Final != nil {
				ix.finals[op.MessageID] = op.Final
				if op.Final.Value != "" {
					ix.msgValue[op.MessageID] = op.Final.Value
				}
			}
			continue
		case history.FDead:
			if op.Type == history.OK {
				ix.dead[op.MessageID] = true
				if op.Final != nil {
					ix.deadRecs[op.MessageID] = op.Final
				}
				if op.Value != "" {
					ix.msgValue[op.MessageID] = op.Value
				}
				ix.deadList = append(ix.deadList, deadEntry{queue: op.Queue, id: op.MessageID, value: op.Value, rec: op.Final})
			}
			continue
		case history.FNemesis:
			ix.nemesis = append(ix.nemesis, op)
			continue
		case history.FCron, history.FCronState:
			continue // the cron checker's alone (cron.go)
		case history.FPhase:
			switch op.Fault {
			case history.PhaseSetup:
				ix.setup = op.Setup
			case history.PhaseFinal:
				ix.finalPhase = &op
			case history.PhaseReplicas:
				ix.replicas = &op
			}
			continue
		}
		if op.Type == history.Invoke {
			pending[op.Process] = op
			if op.F == history.FEnqueue {
				e := ix.enq[op.Value]
				if e == nil {
					e = &enqueue{value: op.Value, queue: op.Queue, group: op.Group, key: op.DedupKey, firstInvoke: op.Time, ids: map[string]bool{}}
					ix.enq[op.Value] = e
					ix.enqOrder = append(ix.enqOrder, e)
				}
				e.attempts++
			}
			ix.invoked(op)
			continue
		}
		inv, ok := pending[op.Process]
		if !ok {
			continue
		}
		delete(pending, op.Process)
		if op.Code == codeExhausted {
			ix.refusals = append(ix.refusals, refusal{f: op.F, queue: inv.Queue, node: op.Node, note: op.Note, msg: op.Error,
				process: op.Process, complet: op.Time, retryMs: op.RetryAfterMs})
		}
		switch op.F {
		case history.FEnqueue:
			e := ix.enq[inv.Value]
			if rank(op.Type) > rank(e.status) {
				e.status = op.Type
			}
			if op.Type == history.OK {
				e.lastOK = op.Time
				if op.MessageID != "" {
					e.ids[op.MessageID] = true
					ix.msgValue[op.MessageID] = inv.Value
					ix.msgQueue[op.MessageID] = inv.Queue
					ix.bornBy(op.MessageID, op.Time)
				}
			}
		case history.FReceive:
			if op.Type != history.OK {
				continue
			}
			for _, d := range op.Deliveries {
				ix.deliveries = append(ix.deliveries, delivery{Delivery: d, queue: inv.Queue, process: op.Process, invoke: inv.Time, complet: op.Time, visMs: inv.VisibilityMs})
				ix.msgQueue[d.MessageID] = inv.Queue
				ix.bornBy(d.MessageID, op.Time)
				if d.Value != "" {
					ix.msgValue[d.MessageID] = d.Value
				}
			}
		case history.FAck, history.FNack, history.FExtend, history.FDeadLetter:
			ix.leaseOps = append(ix.leaseOps, leaseOp{f: op.F, typ: op.Type, msg: inv.MessageID, epoch: inv.Epoch, process: op.Process, invoke: inv.Time, complet: op.Time, deadlineMs: op.DeadlineMs, code: op.Code})
			if op.F == history.FDeadLetter && op.Type != history.Fail {
				ix.deadLettered[inv.MessageID] = true
			}
		case history.FPublish, history.FSubscribe:
			ix.completed(inv, op)
		}
	}
	// An attempt still pending at the end may yet have been applied.
	for _, inv := range pending {
		if p := ix.pubs[inv.Value]; inv.F == history.FPublish && p != nil {
			p.unsure = true
		}
	}
	// Ids seen in deliveries belong to their value's enqueue too.
	for _, d := range ix.deliveries {
		if e := ix.enq[d.Value]; e != nil {
			e.ids[d.MessageID] = true
		}
	}
	return ix
}

// invoked indexes the invoke of a publish or a subscribe.
func (ix *index) invoked(op history.Op) {
	switch op.F {
	case history.FPublish:
		p := ix.pubs[op.Value]
		if p == nil {
			p = &publish{enqueue: &enqueue{value: op.Value, queue: op.Queue, group: op.Group, key: op.DedupKey, firstInvoke: op.Time, ids: map[string]bool{}},
				typ: op.MsgType, attrs: op.Attrs}
			ix.pubs[op.Value] = p
			ix.pubOrder = append(ix.pubOrder, p)
		}
		p.attempts++
	case history.FSubscribe:
		if op.Sub == nil {
			return
		}
		if s := ix.subs[op.Queue]; s == nil {
			ix.subs[op.Queue] = &subscription{name: op.Queue, spec: *op.Sub, firstInvoke: op.Time}
		}
	}
}

// completed indexes the completion done of the publish or subscribe inv.
func (ix *index) completed(inv, done history.Op) {
	switch inv.F {
	case history.FPublish:
		p := ix.pubs[inv.Value]
		if p == nil {
			return
		}
		if rank(done.Type) > rank(p.status) {
			p.status = done.Type
		}
		p.lastDone = max(p.lastDone, done.Time)
		switch done.Type {
		case history.Info:
			p.unsure = true
		case history.OK:
			p.lastOK = done.Time
			if done.MessageID != "" {
				p.ids[done.MessageID] = true
			}
			p.answers = append(p.answers, pubAnswer{invoke: inv.Time, done: done.Time, copies: done.Copies, dedup: done.Deduplicated})
		}
	case history.FSubscribe:
		if s := ix.subs[inv.Queue]; s != nil && done.Type == history.OK && !s.ok {
			s.ok, s.created = true, done.Time
		}
	}
}

// bornBy records that message id existed at time t.
func (ix *index) bornBy(id string, t int64) {
	if b, ok := ix.born[id]; !ok || t < b {
		ix.born[id] = t
	}
}

// finalDone reports whether the final phase completed: only then is a
// message not yet delivered or acked a loss rather than one the run
// stopped watching (checker final reports a final phase that did not).
func (ix *index) finalDone() bool {
	return ix.finalPhase != nil && ix.finalPhase.Type == history.OK
}

// lease is what is known of one lease (message, epoch) on the shard clock.
type lease struct {
	epoch    uint64
	startMs  int64 // when granted; -1 unknown
	deadline int64 // latest deadline known to have been set; 0 unknown
	endedMs  int64 // server: when the attempt ended (0: not ended / unknown)
	outcome  string
	clients  []int // processes that received it (ok receives)
	// settledByClient: an ack/nack of this lease succeeded or may have, so
	// it may have ended before its deadline at a shard time we only know
	// if the server's history still holds the attempt.
	settledByClient bool
}

// validUntil is a lower bound of when the lease stopped being valid: its
// known deadline, or earlier if the server says an ack/nack ended it.
func (l *lease) validUntil() int64 {
	if l.settledByClient && l.endedMs == 0 {
		return 0 // ended early at an unknown time: no claim
	}
	end := l.deadline
	if l.endedMs > 0 && l.outcome != history.OutExpired && (end == 0 || l.endedMs < end) {
		end = l.endedMs
	}
	return end
}

// leases gathers, per message id, every lease known from client deliveries,
// successful extends and the server's attempt history.
func (ix *index) leases() map[string]map[uint64]*lease {
	out := map[string]map[uint64]*lease{}
	get := func(msg string, epoch uint64) *lease {
		m := out[msg]
		if m == nil {
			m = map[uint64]*lease{}
			out[msg] = m
		}
		l := m[epoch]
		if l == nil {
			l = &lease{epoch: epoch, startMs: -1}
			m[epoch] = l
		}
		return l
	}
	for _, d := range ix.deliveries {
		l := get(d.MessageID, d.Epoch)
		l.clients = append(l.clients, d.process)
		if d.DeadlineMs > l.deadline {
			l.deadline = d.DeadlineMs
		}
		if d.visMs > 0 && d.DeadlineMs > 0 {
			// The FSM sets deadline = clock + visibility at the grant.
			l.startMs = d.DeadlineMs - d.visMs
		}
	}
	for _, o := range ix.leaseOps {
		if o.f != history.FExtend && o.typ != history.Fail {
			get(o.msg, o.epoch).settledByClient = true
		}
		if o.f == history.FExtend && o.typ == history.OK && o.deadlineMs > 0 {
			l := get(o.msg, o.epoch)
			if o.deadlineMs > l.deadline {
				l.deadline = o.deadlineMs
			}
		}
	}
	for id, r := range ix.finals {
		for _, a := range r.Attempts {
			if a.Epoch == 0 {
				continue
			}
			l := get(id, a.Epoch)
			if l.startMs < 0 || a.ReceivedMs < l.startMs {
				l.startMs = a.ReceivedMs
			}
			l.endedMs, l.outcome = a.EndedMs, a.Outcome
		}
		if r.LeaseEpoch > 0 && r.LeaseDeadMs > 0 {
			if l := out[id][r.LeaseEpoch]; l != nil && r.LeaseDeadMs > l.deadline {
				l.deadline = r.LeaseDeadMs
			}
		}
	}
	return out
}
