package fsm

import (
	"fmt"
	"strings"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// toProto converts a record for reads and snapshots. The body slice is shared
// (bodies are never mutated).
func (m *msg) toProto(withBody bool) *fsmpb.Message {
	p := m.leasedProto()
	if !withBody {
		p.Body = nil
	}
	p.PublishedAs = m.publishedAs
	if len(m.history) > 0 {
		p.History = make([]*fsmpb.Attempt, len(m.history))
		for i, a := range m.history {
			p.History[i] = &fsmpb.Attempt{
				LeaseEpoch: a.epoch,
				ReceivedMs: a.receivedMs,
				EndedMs:    a.endedMs,
				Outcome:    a.outcome,
				Error:      a.err,
				Consumer:   a.consumer,
			}
		}
	}
	return p
}

// leasedProto is the record with its body and without its delivery
// history: what a receive returns. Every replica builds receive results
// and only the leader's are read, so they are kept lean.
func (m *msg) leasedProto() *fsmpb.Message {
	p := &fsmpb.Message{
		Id:              m.id,
		Queue:           m.q.name,
		Type:            m.typ,
		GroupId:         m.group,
		DedupKey:        m.dedupKey,
		Priority:        uint32(m.priority),
		Seq:             m.seq,
		EnqueuedMs:      m.enqueuedMs,
		AvailableMs:     m.availableMs,
		ReceiveCount:    m.receiveCount,
		FirstReceivedMs: m.firstReceivedMs,
		LastReceivedMs:  m.lastReceivedMs,
		LastError:       m.lastError,
		State:           m.state,
		LeaseEpoch:      m.leaseEpoch,
		LeaseDeadlineMs: m.leaseDeadline,
		LeaseTerm:       m.leaseTerm,
		DeadReason:      m.deadReason,
		StateChangedMs:  m.stateChangedMs,
		ExpireMs:        m.expireMs,
		Body:            m.body,
		Result:          m.result,
		UniqueUntilDone: m.uniqueUntilDone,
	}
	if r := m.retry; r != nil {
		p.MaxReceiveCount, p.BackoffBaseMs, p.BackoffMaxMs = r.maxReceives, r.backoffBaseMs, r.backoffMaxMs
	}
	if len(m.attrs) > 0 {
		p.Attributes = make(map[string]string, len(m.attrs))
		for _, a := range m.attrs {
			p.Attributes[a.k] = a.v
		}
	}
	return p
}

// msgFromProto rebuilds a record from a snapshot.
func msgFromProto(p *fsmpb.Message, q *queue) (*msg, error) {
	if p.GetId() == 0 {
		return nil, fmt.Errorf("message with id 0")
	}
	if p.GetPriority() > MaxPriority {
		return nil, fmt.Errorf("message %d: priority %d", p.GetId(), p.GetPriority())
	}
	switch p.GetState() {
	case fsmpb.State_STATE_READY, fsmpb.State_STATE_DELAYED, fsmpb.State_STATE_LEASED, fsmpb.State_STATE_DEAD, fsmpb.State_STATE_ACKED:
	default:
		return nil, fmt.Errorf("message %d: state %v", p.GetId(), p.GetState())
	}
	m := &msg{
		id:              p.GetId(),
		seq:             p.GetSeq(),
		q:               q,
		body:            p.GetBody(),
		publishedAs:     p.GetPublishedAs(),
		typ:             p.GetType(),
		group:           p.GetGroupId(),
		dedupKey:        p.GetDedupKey(),
		lastError:       p.GetLastError(),
		enqueuedMs:      p.GetEnqueuedMs(),
		availableMs:     p.GetAvailableMs(),
		firstReceivedMs: p.GetFirstReceivedMs(),
		lastReceivedMs:  p.GetLastReceivedMs(),
		stateChangedMs:  p.GetStateChangedMs(),
		expireMs:        p.GetExpireMs(),
		leaseEpoch:      p.GetLeaseEpoch(),
		leaseDeadline:   p.GetLeaseDeadlineMs(),
		leaseTerm:       p.GetLeaseTerm(),
		receiveCount:    p.GetReceiveCount(),
		priority:        uint8(p.GetPriority()),
		state:           p.GetState(),
		deadReason:      p.GetDeadReason(),
		uniqueUntilDone: p.GetUniqueUntilDone(),
		attrs:           sortedAttrs(p.GetAttributes()),
		result:          p.GetResult(),
		retry:           newRetryPolicy(p.GetMaxReceiveCount(), p.GetBackoffBaseMs(), p.GetBackoffMaxMs()),
	}
	if len(m.body) == 0 {
		m.body = nil
	}
	if len(m.result) == 0 || m.state != fsmpb.State_STATE_ACKED {
		m.result = nil
	}
	for _, a := range p.GetHistory() {
		m.history = append(m.history, attempt{
			epoch:      a.GetLeaseEpoch(),
			receivedMs: a.GetReceivedMs(),
			endedMs:    a.GetEndedMs(),
			outcome:    a.GetOutcome(),
			err:        a.GetError(),
			consumer:   a.GetConsumer(),
		})
	}
	return m, nil
}

// stateWord names a state as clients print it ("acked" for STATE_ACKED).
func stateWord(st fsmpb.State) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "STATE_"))
}
