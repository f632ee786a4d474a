package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// Misfire is what a schedule does with slots missed by more than its
// grace (the cluster was down, the meta group had no leader).
type Misfire int

const (
	// MisfireFireOnce fires the latest missed slot once (the default).
	MisfireFireOnce Misfire = iota
	// MisfireSkip fires no missed slot.
	MisfireSkip
	// MisfireCatchUp fires the latest CatchUpMax missed slots.
	MisfireCatchUp
)

var misfireProto = map[Misfire]raftqv1.MisfirePolicy{
	MisfireFireOnce: raftqv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ONCE,
	MisfireSkip:     raftqv1.MisfirePolicy_MISFIRE_POLICY_SKIP,
	MisfireCatchUp:  raftqv1.MisfirePolicy_MISFIRE_POLICY_CATCH_UP,
}

// Schedule is a recurring job (docs/jobs.md, "Recurring jobs (cron)"):
// a message on Queue at every slot of Spec, each slot once.
type Schedule struct {
	Name string
	// Spec: a 5-field cron expression, @hourly/@daily/@weekly/@monthly/
	// @yearly, or "@every 30s".
	Spec     string
	TimeZone string // IANA name; "" = UTC
	Queue    string
	// Body is a template: {{schedule}}, {{slot}} (RFC 3339) and
	// {{slot_ms}} are replaced per message.
	Body       []byte
	Attributes map[string]string
	Type       string
	GroupID    string // for FIFO queues
	Misfire    Misfire
	CatchUpMax uint32        // with MisfireCatchUp
	Grace      time.Duration // how late a slot may fire on time; 0 = 1 minute

	// Read-only.
	Paused            bool
	ID                uint64
	Created           time.Time
	NextFire          time.Time // zero: paused or no further slot
	LastSlot          time.Time // zero: none yet
	Fired, Skipped    uint64
	TriggersRequested uint64
	TriggersFired     uint64
}

func (s Schedule) proto() *raftqv1.ScheduleInfo {
	m, ok := misfireProto[s.Misfire]
	if !ok {
		m = raftqv1.MisfirePolicy(-1) // refused by the server
	}
	return &raftqv1.ScheduleInfo{
		Name: s.Name, Spec: s.Spec, TimeZone: s.TimeZone, Queue: s.Queue, Body: s.Body, Attributes: s.Attributes,
		Type: s.Type, GroupId: s.GroupID, Misfire: m, CatchUpMax: s.CatchUpMax, MisfireGraceMs: s.Grace.Milliseconds(),
	}
}

func scheduleFrom(p *raftqv1.ScheduleInfo) Schedule {
	s := Schedule{
		Name: p.GetName(), Spec: p.GetSpec(), TimeZone: p.GetTimeZone(), Queue: p.GetQueue(), Body: p.GetBody(),
		Attributes: p.GetAttributes(), Type: p.GetType(), GroupID: p.GetGroupId(), CatchUpMax: p.GetCatchUpMax(),
		Grace: time.Duration(p.GetMisfireGraceMs()) * time.Millisecond, Paused: p.GetPaused(), ID: p.GetId(),
		Created: unixMs(p.GetCreatedMs()), NextFire: unixMs(p.GetNextFireMs()), LastSlot: unixMs(p.GetLastSlotMs()),
		Fired: p.GetFired(), Skipped: p.GetSkipped(), TriggersRequested: p.GetTriggersRequested(), TriggersFired: p.GetTriggersFired(),
	}
	for k, v := range misfireProto {
		if v == p.GetMisfire() {
			s.Misfire = k
		}
	}
	return s
}

func (c *Client) schedules(ctx context.Context, safe bool, call func(context.Context, raftqv1.SchedulesClient, ...grpc.CallOption) (*raftqv1.ScheduleInfo, error)) (Schedule, error) {
	var resp *raftqv1.ScheduleInfo
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: safe}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = call(ctx, raftqv1.NewSchedulesClient(cc), co...)
		return err
	})
	if err != nil {
		return Schedule{}, err
	}
	return scheduleFrom(resp), nil
}

// CreateSchedule creates a schedule on an existing queue; creating it
// again with the same definition returns it (a retry is safe), with
// another fails with ErrExists.
func (c *Client) CreateSchedule(ctx context.Context, s Schedule) (Schedule, error) {
	got, err := c.schedules(ctx, true, func(ctx context.Context, x raftqv1.SchedulesClient, co ...grpc.CallOption) (*raftqv1.ScheduleInfo, error) {
		return x.CreateSchedule(ctx, &raftqv1.CreateScheduleRequest{Schedule: s.proto()}, co...)
	})
	if err != nil {
		return Schedule{}, fmt.Errorf("create schedule %q: %w", s.Name, err)
	}
	return got, nil
}

// GetSchedule returns one schedule with its next fire time.
func (c *Client) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	got, err := c.schedules(ctx, true, func(ctx context.Context, x raftqv1.SchedulesClient, co ...grpc.CallOption) (*raftqv1.ScheduleInfo, error) {
		return x.GetSchedule(ctx, &raftqv1.GetScheduleRequest{Name: name}, co...)
	})
	if err != nil {
		return Schedule{}, fmt.Errorf("get schedule %q: %w", name, err)
	}
	return got, nil
}

// ListSchedules lists every schedule by name, with next fire times.
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	var resp *raftqv1.ListSchedulesResponse
	err := c.invoke(ctx, callSpec{shard: anyShard, safe: true}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) (err error) {
		resp, err = raftqv1.NewSchedulesClient(cc).ListSchedules(ctx, &raftqv1.ListSchedulesRequest{}, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out := make([]Schedule, len(resp.GetSchedules()))
	for i, s := range resp.GetSchedules() {
		out[i] = scheduleFrom(s)
	}
	return out, nil
}

// PauseSchedule stops a schedule firing.
func (c *Client) PauseSchedule(ctx context.Context, name string) (Schedule, error) {
	got, err := c.schedules(ctx, true, func(ctx context.Context, x raftqv1.SchedulesClient, co ...grpc.CallOption) (*raftqv1.ScheduleInfo, error) {
		return x.PauseSchedule(ctx, &raftqv1.PauseScheduleRequest{Name: name}, co...)
	})
	if err != nil {
		return Schedule{}, fmt.Errorf("pause schedule %q: %w", name, err)
	}
	return got, nil
}

// ResumeSchedule starts a paused schedule again from now: slots that
// passed while it was paused never fire.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (Schedule, error) {
	got, err := c.schedules(ctx, true, func(ctx context.Context, x raftqv1.SchedulesClient, co ...grpc.CallOption) (*raftqv1.ScheduleInfo, error) {
		return x.ResumeSchedule(ctx, &raftqv1.ResumeScheduleRequest{Name: name}, co...)
	})
	if err != nil {
		return Schedule{}, fmt.Errorf("resume schedule %q: %w", name, err)
	}
	return got, nil
}

// TriggerSchedule enqueues one extra message now, paused or not. Not
// retried by the client: a retry after an unknown outcome could trigger
// twice.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (Schedule, error) {
	got, err := c.schedules(ctx, false, func(ctx context.Context, x raftqv1.SchedulesClient, co ...grpc.CallOption) (*raftqv1.ScheduleInfo, error) {
		return x.TriggerSchedule(ctx, &raftqv1.TriggerScheduleRequest{Name: name}, co...)
	})
	if err != nil {
		return Schedule{}, fmt.Errorf("trigger schedule %q: %w", name, err)
	}
	return got, nil
}

// DeleteSchedule removes a schedule; messages it sent stay queued.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	err := c.invoke(ctx, callSpec{shard: anyShard}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		_, err := raftqv1.NewSchedulesClient(cc).DeleteSchedule(ctx, &raftqv1.DeleteScheduleRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	return nil
}
