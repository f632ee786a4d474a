package clienttest

import (
	"strings"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"google.golang.org/grpc/codes"
)

// maxReceives is m's own max receive count, else its queue's; callers
// hold s.mu.
func (s *Server) maxReceives(m *raftqv1.Message) uint32 {
	if n := m.GetMaxReceiveCount(); n > 0 {
		return n
	}
	return s.queues[m.Queue].GetPolicy().GetMaxReceiveCount()
}

// matching keeps the dead messages f matches, as a node's shards filter.
func matching(dead []*raftqv1.Message, f *raftqv1.DeadFilter) []*raftqv1.Message {
	if f == nil {
		return dead
	}
	var out []*raftqv1.Message
	for _, m := range dead {
		t := m.GetStateChangedMs()
		if (f.GetType() == "" || m.GetType() == f.GetType()) &&
			(f.GetErrorContains() == "" || strings.Contains(m.GetLastError(), f.GetErrorContains())) &&
			t >= f.GetDeadSinceMs() && (f.GetDeadUntilMs() == 0 || t < f.GetDeadUntilMs()) {
			out = append(out, m)
		}
	}
	return out
}

// redriveTo sends each dead message to target with the dedup key a node
// uses ("redrive:SOURCE/ID"), then drops it from source; callers hold
// s.mu.
func (s *Server) redriveTo(source, target string, dead []*raftqv1.Message) (*raftqv1.RedriveResponse, error) {
	if target == source {
		return nil, errorf(codes.InvalidArgument, "target_queue is the queue itself: leave it empty to redrive in place")
	}
	if _, err := s.queue(target); err != nil {
		return nil, err
	}
	var n uint64
	for _, m := range dead {
		_, err := s.enqueue(target, &raftqv1.SendRequest{
			Body: m.GetBody(), Attributes: m.GetAttributes(), Type: m.GetType(), GroupId: m.GetGroupId(),
			DedupKey: "redrive:" + source + "/" + s.publicID(m.Id), Priority: m.GetPriority(),
			MaxReceiveCount: m.GetMaxReceiveCount(), BackoffBaseMs: m.GetBackoffBaseMs(), BackoffMaxMs: m.GetBackoffMaxMs(),
		})
		if err != nil {
			return nil, err
		}
		delete(s.msgs, m.Id)
		n++
	}
	s.notify()
	return &raftqv1.RedriveResponse{Redriven: n}, nil
}
