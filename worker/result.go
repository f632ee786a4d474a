package worker

import (
	"context"
	"fmt"

	"github.com/raftq/raftq/client"
)

// SetResult gives the job a result (at most client.MaxResultBytes): when
// the handler returns nil, the ack carries it, and GetMessage and
// client.Wait return it for the queue's completed retention
// (docs/jobs.md, "Job results and status"). A later call replaces an
// earlier one; a handler that returns an error acks nothing, so its result
// is dropped.
func (m *Message) SetResult(b []byte) error {
	if m.j == nil {
		return fmt.Errorf("set result of %s: %w", m.ID, errNotDelivered)
	}
	if len(b) > client.MaxResultBytes {
		return fmt.Errorf("set result of %s: %w: %d bytes, limit %d", m.ID, client.ErrInvalid, len(b), client.MaxResultBytes)
	}
	c := append([]byte(nil), b...) // the handler may reuse b after returning
	m.j.result.Store(&c)
	return nil
}

// ack acknowledges the job, with its result when the handler set one.
func (j *job) ack(ctx context.Context) error {
	if p := j.result.Load(); p != nil {
		return j.r.w.c.AckWithResult(ctx, j.m.Receipt, *p)
	}
	return j.r.w.c.Ack(ctx, j.m.Receipt)
}
