package clienttest

import (
	"context"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// PauseQueue marks the queue paused: receives lease nothing (take) and long
// polls wait until ResumeQueue, as on a real cluster.
func (q *queuesSvc) PauseQueue(_ context.Context, r *raftqv1.PauseQueueRequest) (*raftqv1.QueueInfo, error) {
	return q.setPaused(r.GetName(), true)
}

// ResumeQueue lifts a pause and wakes waiting receives.
func (q *queuesSvc) ResumeQueue(_ context.Context, r *raftqv1.ResumeQueueRequest) (*raftqv1.QueueInfo, error) {
	return q.setPaused(r.GetName(), false)
}

func (q *queuesSvc) setPaused(name string, paused bool) (*raftqv1.QueueInfo, error) {
	s := q.s
	s.mu.Lock()
	defer s.mu.Unlock()
	info, err := s.queue(name)
	if err != nil {
		return nil, err
	}
	info.Paused = paused
	if !paused {
		s.notify()
	}
	return info, nil
}
