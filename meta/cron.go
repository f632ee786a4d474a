package meta

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/cron"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/raftgroup"
)

// Recurring jobs (log format 7, docs/jobs.md "Recurring jobs (cron)"):
// schedules live here; the meta leader's firer (cluster/cron.go) sends
// each slot's message and records the slot with RecordCronFire, so the
// next leader goes on after it.

// Limits of schedules.
const (
	// MaxCronSchedules bounds the schedules of a cluster: the meta
	// snapshot stays small and one firer pass stays short.
	MaxCronSchedules = 1000
	// MaxCronNameLen bounds a schedule's name.
	MaxCronNameLen = 128
	// MaxCronBodyBytes bounds a schedule's body template.
	MaxCronBodyBytes = 64 << 10
	// MaxCronCatchUp bounds catch_up_max.
	MaxCronCatchUp = 1000
	// MaxCronGrace bounds misfire_grace_ms.
	MaxCronGrace = 24 * time.Hour
)

// Attributes the firer adds to every message it sends; a schedule may not
// set them itself.
const (
	CronAttrSchedule = "raftq-cron-schedule"
	CronAttrSlot     = "raftq-cron-slot"    // the slot's Unix milliseconds
	CronAttrTrigger  = "raftq-cron-trigger" // the trigger's number, on manual fires
)

// ValidateCronSchedule checks what a client sets on a schedule, at the API:
// what Apply checks (validCronRecord), and that this node knows the time
// zone.
func ValidateCronSchedule(s *metapb.CronSchedule) error {
	if err := validCronRecord(s); err != nil {
		return err
	}
	if _, err := cron.LoadZone(s.GetTimeZone()); err != nil {
		return fmt.Errorf("schedule %q: %w", s.GetName(), err)
	}
	return nil
}

// validCronRecord is what Apply checks of a schedule; the rules may only
// ever loosen. Nothing here may depend on the node: whether a zone name
// loads does (time.LoadLocation reads the host's zone files before the
// copy built into the binary), and replicas that disagreed on it would
// hold different schedules and so fire under different ids. So Apply
// checks the expression in UTC and the zone name's form only; the firer
// skips a schedule whose zone it cannot load (cluster/cron.go).
func validCronRecord(s *metapb.CronSchedule) error {
	if err := validCronName(s.GetName()); err != nil {
		return err
	}
	if _, err := cron.Parse(s.GetSpec(), ""); err != nil {
		return err
	}
	if err := validZoneName(s.GetTimeZone()); err != nil {
		return fmt.Errorf("schedule %q: %w", s.GetName(), err)
	}
	if err := fsm.ValidateQueueName(s.GetQueue()); err != nil {
		return fmt.Errorf("schedule %q: %w", s.GetName(), err)
	}
	if n := len(s.GetBody()); n > MaxCronBodyBytes {
		return fmt.Errorf("schedule %q: body is %d bytes, limit %d", s.GetName(), n, MaxCronBodyBytes)
	}
	for k := range s.GetAttributes() {
		if strings.HasPrefix(k, "raftq-cron-") {
			return fmt.Errorf("schedule %q: attribute %q: the raftq-cron- prefix is the firer's", s.GetName(), k)
		}
	}
	// The message the firer will send, with its own attributes at their
	// longest, must pass the default policy's limits.
	m := cronMessageIn(s, "", time.UnixMilli(0), longestOffset)
	m.Attributes[CronAttrSlot] = strings.Repeat("9", 20)
	m.Attributes[CronAttrTrigger] = strings.Repeat("9", 20)
	p := fsm.NormalizePolicy(nil)
	p.Mode = fsmpb.QueueMode_QUEUE_MODE_STANDARD
	if err := fsm.ValidateMessage(m, p); err != nil {
		return fmt.Errorf("schedule %q: %w", s.GetName(), err)
	}
	switch s.GetMisfire() {
	case metapb.CronMisfire_CRON_MISFIRE_FIRE_ONCE, metapb.CronMisfire_CRON_MISFIRE_SKIP:
		if s.GetCatchUpMax() != 0 {
			return fmt.Errorf("schedule %q: catch_up_max is only for the catch-up misfire policy", s.GetName())
		}
	case metapb.CronMisfire_CRON_MISFIRE_CATCH_UP:
		if c := s.GetCatchUpMax(); c < 1 || c > MaxCronCatchUp {
			return fmt.Errorf("schedule %q: catch_up_max is %d, allowed 1..%d", s.GetName(), c, MaxCronCatchUp)
		}
	default:
		return fmt.Errorf("schedule %q: unknown misfire policy %d", s.GetName(), s.GetMisfire())
	}
	if g := s.GetMisfireGraceMs(); g < 0 || g > MaxCronGrace.Milliseconds() {
		return fmt.Errorf("schedule %q: misfire grace is %d ms, allowed 0..%d", s.GetName(), g, MaxCronGrace.Milliseconds())
	}
	return nil
}

// validZoneName checks the form of an IANA zone name ("" is UTC).
func validZoneName(zone string) error {
	if len(zone) > maxZoneNameLen {
		return fmt.Errorf("time zone name is %d bytes, limit %d", len(zone), maxZoneNameLen)
	}
	for _, c := range zone {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/_+-", c)) {
			return fmt.Errorf("time zone %q: not an IANA name such as Europe/Berlin", zone)
		}
	}
	return nil
}

// maxZoneNameLen bounds a time zone name; the longest IANA name is 32
// bytes.
const maxZoneNameLen = 64

func validCronName(name string) error {
	if name == "" || len(name) > MaxCronNameLen {
		return fmt.Errorf("schedule name must be 1 to %d bytes, got %d", MaxCronNameLen, len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("schedule name %q: only letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

// cronDefinition is the part of a schedule its creator sets: two creates
// of one name with equal definitions are one create retried.
func cronDefinition(s *metapb.CronSchedule) *metapb.CronSchedule {
	return &metapb.CronSchedule{
		Name: s.GetName(), Spec: s.GetSpec(), TimeZone: s.GetTimeZone(), Queue: s.GetQueue(),
		Body: s.GetBody(), Attributes: s.GetAttributes(), Type: s.GetType(), GroupId: s.GetGroupId(),
		Misfire: s.GetMisfire(), CatchUpMax: s.GetCatchUpMax(), MisfireGraceMs: s.GetMisfireGraceMs(),
	}
}

func (f *FSM) createCronSchedule(c *metapb.CreateCronSchedule, nowMs int64) *metapb.Result {
	s := c.GetSchedule()
	if err := validCronRecord(s); err != nil {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: err.Error()}
	}
	def := cronDefinition(s)
	if old, ok := f.cron[s.GetName()]; ok {
		if proto.Equal(cronDefinition(old), def) {
			return &metapb.Result{}
		}
		return &metapb.Result{Code: metapb.Code_CODE_EXISTS, Message: fmt.Sprintf("schedule %q exists with another definition", s.GetName())}
	}
	if len(f.cron) >= MaxCronSchedules {
		return &metapb.Result{Code: metapb.Code_CODE_REFUSED, Message: fmt.Sprintf("the cluster holds %d schedules, the most it keeps", MaxCronSchedules)}
	}
	def.Id = max(f.nextCron, 1)
	f.nextCron = def.Id + 1
	def.CreatedMs, def.AfterMs = nowMs, nowMs
	f.cron[def.GetName()] = def
	return &metapb.Result{}
}

func (f *FSM) cronNotFound(name string) *metapb.Result {
	return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("schedule %q not found", name)}
}

// setCronPaused replaces the record rather than mutating it: readers
// hold clones, and a fresh record keeps that rule obvious.
func (f *FSM) setCronPaused(c *metapb.SetCronPaused, nowMs int64) *metapb.Result {
	old, ok := f.cron[c.GetName()]
	if !ok {
		return f.cronNotFound(c.GetName())
	}
	if old.GetPaused() == c.GetPaused() {
		return &metapb.Result{}
	}
	s := proto.CloneOf(old)
	s.Paused = c.GetPaused()
	if !s.Paused {
		s.AfterMs = max(s.GetAfterMs(), nowMs)
	}
	f.cron[s.GetName()] = s
	return &metapb.Result{}
}

func (f *FSM) deleteCronSchedule(c *metapb.DeleteCronSchedule) *metapb.Result {
	if _, ok := f.cron[c.GetName()]; !ok {
		return f.cronNotFound(c.GetName())
	}
	delete(f.cron, c.GetName())
	return &metapb.Result{}
}

func (f *FSM) triggerCronSchedule(c *metapb.TriggerCronSchedule) *metapb.Result {
	old, ok := f.cron[c.GetName()]
	if !ok {
		return f.cronNotFound(c.GetName())
	}
	s := proto.CloneOf(old)
	s.TriggersRequested++
	f.cron[s.GetName()] = s
	return &metapb.Result{}
}

func (f *FSM) recordCronFire(c *metapb.RecordCronFire) *metapb.Result {
	old, ok := f.cron[c.GetName()]
	if !ok || old.GetId() != c.GetId() {
		return f.cronNotFound(c.GetName()) // deleted (and perhaps recreated) meanwhile
	}
	s := proto.CloneOf(old)
	if c.GetSlotMs() > s.GetLastSlotMs() {
		s.LastSlotMs = c.GetSlotMs()
		s.Fired += c.GetFired()
		s.Skipped += c.GetSkipped()
	}
	s.TriggersFired = min(max(s.GetTriggersFired(), c.GetTriggersFired()), s.GetTriggersRequested())
	f.cron[s.GetName()] = s
	return &metapb.Result{}
}

// CronSchedule returns a copy of one schedule from the local replica.
func (f *FSM) CronSchedule(name string) (*metapb.CronSchedule, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s, ok := f.cron[name]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(s), true
}

// CronSchedules returns copies of every schedule, sorted by name.
func (f *FSM) CronSchedules() []*metapb.CronSchedule {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cronSchedulesLocked()
}

func (f *FSM) cronSchedulesLocked() []*metapb.CronSchedule {
	out := make([]*metapb.CronSchedule, 0, len(f.cron))
	for _, s := range f.cron {
		out = append(out, proto.CloneOf(s))
	}
	slices.SortFunc(out, func(a, b *metapb.CronSchedule) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

func cronFromProto(list []*metapb.CronSchedule) map[string]*metapb.CronSchedule {
	m := make(map[string]*metapb.CronSchedule, len(list))
	for _, s := range list {
		m[s.GetName()] = s
	}
	return m
}

// CreateCronSchedule adds a schedule; a retried create of the same
// definition succeeds.
func (s *Store) CreateCronSchedule(ctx context.Context, sc *metapb.CronSchedule) (*metapb.CronSchedule, error) {
	if err := ValidateCronSchedule(sc); err != nil {
		return nil, fmt.Errorf("create schedule: %w", refused(ErrInvalid, "%v", err))
	}
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_CreateCronSchedule{CreateCronSchedule: &metapb.CreateCronSchedule{Schedule: cronDefinition(sc)}}}); err != nil {
		return nil, fmt.Errorf("create schedule %q: %w", sc.GetName(), err)
	}
	return s.appliedCron(sc.GetName())
}

// SetCronPaused pauses or resumes a schedule.
func (s *Store) SetCronPaused(ctx context.Context, name string, paused bool) (*metapb.CronSchedule, error) {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_SetCronPaused{SetCronPaused: &metapb.SetCronPaused{Name: name, Paused: paused}}}); err != nil {
		return nil, fmt.Errorf("pause schedule %q: %w", name, err)
	}
	return s.appliedCron(name)
}

// TriggerCronSchedule asks the firer for one extra message now.
func (s *Store) TriggerCronSchedule(ctx context.Context, name string) (*metapb.CronSchedule, error) {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_TriggerCronSchedule{TriggerCronSchedule: &metapb.TriggerCronSchedule{Name: name}}}); err != nil {
		return nil, fmt.Errorf("trigger schedule %q: %w", name, err)
	}
	return s.appliedCron(name)
}

// DeleteCronSchedule removes a schedule; messages it sent stay queued.
func (s *Store) DeleteCronSchedule(ctx context.Context, name string) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_DeleteCronSchedule{DeleteCronSchedule: &metapb.DeleteCronSchedule{Name: name}}}); err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	return nil
}

// RecordCronFire records a firer pass (RecordCronFire in meta.proto).
func (s *Store) RecordCronFire(ctx context.Context, rec *metapb.RecordCronFire) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_RecordCronFire{RecordCronFire: rec}}); err != nil {
		return fmt.Errorf("record fire of schedule %q: %w", rec.GetName(), err)
	}
	return nil
}

// Barrier waits until this leader has applied every entry committed
// before its term, so what it reads is what its predecessors recorded.
func (s *Store) Barrier(ctx context.Context) error {
	if err := raftgroup.WaitFuture(ctx, s.raft.Barrier(timeoutOf(ctx)), s.stopped); err != nil {
		return fmt.Errorf("meta barrier: %w", err)
	}
	return nil
}

// CronSchedule returns a copy of one schedule from the local replica.
func (s *Store) CronSchedule(name string) (*metapb.CronSchedule, bool) {
	return s.fsm.CronSchedule(name)
}

// CronSchedules returns copies of every schedule from the local replica.
func (s *Store) CronSchedules() []*metapb.CronSchedule { return s.fsm.CronSchedules() }

func (s *Store) appliedCron(name string) (*metapb.CronSchedule, error) {
	got, ok := s.fsm.CronSchedule(name)
	if !ok {
		// Applied here (apply returns after the local FSM applied it), so
		// only a delete in between can take it away.
		return nil, refused(ErrNotFound, "schedule %q was deleted meanwhile", name)
	}
	return got, nil
}
