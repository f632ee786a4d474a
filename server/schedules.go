package server

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/cron"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
)

// schedulesSvc serves the Schedules API (docs/jobs.md, "Recurring jobs
// (cron)"). Schedules live in meta: writes go to the meta leader, reads
// answer from the local replica; the meta leader's firer
// (cluster/cron.go) sends their messages.
type schedulesSvc struct {
	*Server
	raftqv1.UnimplementedSchedulesServer
}

func forwardSchedules[T any](ctx context.Context, s *Server, err error, fn func(context.Context, raftqv1.SchedulesClient) (T, error)) (T, error) {
	return forwardToMetaLeader(ctx, s, err, func(ctx context.Context, cc *grpc.ClientConn) (T, error) {
		return fn(ctx, raftqv1.NewSchedulesClient(cc))
	})
}

func (x *schedulesSvc) CreateSchedule(ctx context.Context, req *raftqv1.CreateScheduleRequest) (*raftqv1.ScheduleInfo, error) {
	sc := scheduleToMeta(req.GetSchedule())
	if err := meta.ValidateCronSchedule(sc); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, ok := x.node.Meta().Queue(sc.GetQueue()); !ok {
		return nil, status.Errorf(codes.NotFound, "queue %q not found; create it before its schedule", sc.GetQueue())
	}
	got, err := x.node.Meta().CreateCronSchedule(ctx, sc)
	if err != nil {
		return forwardSchedules(ctx, x.Server, err, func(ctx context.Context, c raftqv1.SchedulesClient) (*raftqv1.ScheduleInfo, error) {
			return c.CreateSchedule(ctx, req)
		})
	}
	return scheduleInfo(got, time.Now()), nil
}

func (x *schedulesSvc) GetSchedule(_ context.Context, req *raftqv1.GetScheduleRequest) (*raftqv1.ScheduleInfo, error) {
	s, ok := x.node.Meta().CronSchedule(req.GetName())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "schedule %q not found", req.GetName())
	}
	return scheduleInfo(s, time.Now()), nil
}

func (x *schedulesSvc) ListSchedules(context.Context, *raftqv1.ListSchedulesRequest) (*raftqv1.ListSchedulesResponse, error) {
	list := x.node.Meta().CronSchedules()
	now := time.Now()
	out := &raftqv1.ListSchedulesResponse{Schedules: make([]*raftqv1.ScheduleInfo, len(list))}
	for i, s := range list {
		out.Schedules[i] = scheduleInfo(s, now)
	}
	return out, nil
}

func (x *schedulesSvc) PauseSchedule(ctx context.Context, req *raftqv1.PauseScheduleRequest) (*raftqv1.ScheduleInfo, error) {
	got, err := x.node.Meta().SetCronPaused(ctx, req.GetName(), true)
	if err != nil {
		return forwardSchedules(ctx, x.Server, err, func(ctx context.Context, c raftqv1.SchedulesClient) (*raftqv1.ScheduleInfo, error) {
			return c.PauseSchedule(ctx, req)
		})
	}
	return scheduleInfo(got, time.Now()), nil
}

func (x *schedulesSvc) ResumeSchedule(ctx context.Context, req *raftqv1.ResumeScheduleRequest) (*raftqv1.ScheduleInfo, error) {
	got, err := x.node.Meta().SetCronPaused(ctx, req.GetName(), false)
	if err != nil {
		return forwardSchedules(ctx, x.Server, err, func(ctx context.Context, c raftqv1.SchedulesClient) (*raftqv1.ScheduleInfo, error) {
			return c.ResumeSchedule(ctx, req)
		})
	}
	return scheduleInfo(got, time.Now()), nil
}

func (x *schedulesSvc) DeleteSchedule(ctx context.Context, req *raftqv1.DeleteScheduleRequest) (*raftqv1.DeleteScheduleResponse, error) {
	if err := x.node.Meta().DeleteCronSchedule(ctx, req.GetName()); err != nil {
		return forwardSchedules(ctx, x.Server, err, func(ctx context.Context, c raftqv1.SchedulesClient) (*raftqv1.DeleteScheduleResponse, error) {
			return c.DeleteSchedule(ctx, req)
		})
	}
	return &raftqv1.DeleteScheduleResponse{}, nil
}

func (x *schedulesSvc) TriggerSchedule(ctx context.Context, req *raftqv1.TriggerScheduleRequest) (*raftqv1.ScheduleInfo, error) {
	got, err := x.node.Meta().TriggerCronSchedule(ctx, req.GetName())
	if err != nil {
		return forwardSchedules(ctx, x.Server, err, func(ctx context.Context, c raftqv1.SchedulesClient) (*raftqv1.ScheduleInfo, error) {
			return c.TriggerSchedule(ctx, req)
		})
	}
	return scheduleInfo(got, time.Now()), nil
}

var misfireToMeta = map[raftqv1.MisfirePolicy]metapb.CronMisfire{
	raftqv1.MisfirePolicy_MISFIRE_POLICY_UNSPECIFIED: metapb.CronMisfire_CRON_MISFIRE_FIRE_ONCE,
	raftqv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ONCE:   metapb.CronMisfire_CRON_MISFIRE_FIRE_ONCE,
	raftqv1.MisfirePolicy_MISFIRE_POLICY_SKIP:        metapb.CronMisfire_CRON_MISFIRE_SKIP,
	raftqv1.MisfirePolicy_MISFIRE_POLICY_CATCH_UP:    metapb.CronMisfire_CRON_MISFIRE_CATCH_UP,
}

// scheduleToMeta converts what a client sets; an unknown misfire policy
// becomes one meta.ValidateCronSchedule refuses.
func scheduleToMeta(s *raftqv1.ScheduleInfo) *metapb.CronSchedule {
	m, ok := misfireToMeta[s.GetMisfire()]
	if !ok {
		m = metapb.CronMisfire(-1)
	}
	return &metapb.CronSchedule{
		Name: s.GetName(), Spec: s.GetSpec(), TimeZone: s.GetTimeZone(), Queue: s.GetQueue(),
		Body: s.GetBody(), Attributes: s.GetAttributes(), Type: s.GetType(), GroupId: s.GetGroupId(),
		Misfire: m, CatchUpMax: s.GetCatchUpMax(), MisfireGraceMs: s.GetMisfireGraceMs(),
	}
}

func scheduleInfo(s *metapb.CronSchedule, now time.Time) *raftqv1.ScheduleInfo {
	var misfire raftqv1.MisfirePolicy
	for k, v := range misfireToMeta {
		if v == s.GetMisfire() && k != raftqv1.MisfirePolicy_MISFIRE_POLICY_UNSPECIFIED {
			misfire = k
		}
	}
	return &raftqv1.ScheduleInfo{
		Name: s.GetName(), Spec: s.GetSpec(), TimeZone: s.GetTimeZone(), Queue: s.GetQueue(),
		Body: s.GetBody(), Attributes: s.GetAttributes(), Type: s.GetType(), GroupId: s.GetGroupId(),
		Misfire: misfire, CatchUpMax: s.GetCatchUpMax(), MisfireGraceMs: s.GetMisfireGraceMs(),
		Paused: s.GetPaused(), Id: s.GetId(), CreatedMs: s.GetCreatedMs(), NextFireMs: nextFireMs(s, now),
		LastSlotMs: s.GetLastSlotMs(), Fired: s.GetFired(), Skipped: s.GetSkipped(),
		TriggersRequested: s.GetTriggersRequested(), TriggersFired: s.GetTriggersFired(),
	}
}

// nextFireMs is the first slot after both now and the last settled one.
func nextFireMs(s *metapb.CronSchedule, now time.Time) int64 {
	spec, err := cron.Parse(s.GetSpec(), s.GetTimeZone())
	if err != nil || s.GetPaused() {
		return 0
	}
	from := time.UnixMilli(max(s.GetAfterMs(), s.GetLastSlotMs()))
	if now.After(from) {
		from = now
	}
	if t := spec.Next(time.UnixMilli(s.GetCreatedMs()), from); !t.IsZero() {
		return t.UnixMilli()
	}
	return 0
}
