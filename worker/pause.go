package worker

import (
	"context"
	"fmt"
)

// PauseQueue pauses the worker's queue for every consumer, not only this
// worker (client.Client.PauseQueue): a handler that finds a dependency
// down can stop the whole queue's deliveries instead of burning attempts.
// Handlers already running finish and settle as usual; the worker keeps
// long-polling and picks work up again once the queue is resumed.
func (w *Worker) PauseQueue(ctx context.Context) error {
	if _, err := w.c.PauseQueue(ctx, w.queue); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// ResumeQueue resumes the worker's queue (client.Client.ResumeQueue).
func (w *Worker) ResumeQueue(ctx context.Context) error {
	if _, err := w.c.ResumeQueue(ctx, w.queue); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}
