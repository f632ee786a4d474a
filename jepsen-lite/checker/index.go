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
		case history.FAck, history.FNack, history.FExtend:
			ix.leaseOps = append(ix.leaseOps, leaseOp{f: op.F, typ: op.Type, msg: inv.MessageID, epoch: inv.Epoch, process: op.Process, invoke: inv.Time, complet: op.Time, deadlineMs: op.DeadlineMs, code: op.Code})
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
