package meta

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
)

func cronDef(name string) *metapb.CronSchedule {
	return &metapb.CronSchedule{Name: name, Spec: "@every 1s", Queue: "jobs", Body: []byte("tick {{slot_ms}}")}
}

func cronCmd(c any) *metapb.Command {
	switch c := c.(type) {
	case *metapb.CreateCronSchedule:
		return &metapb.Command{Cmd: &metapb.Command_CreateCronSchedule{CreateCronSchedule: c}}
	case *metapb.SetCronPaused:
		return &metapb.Command{Cmd: &metapb.Command_SetCronPaused{SetCronPaused: c}}
	case *metapb.DeleteCronSchedule:
		return &metapb.Command{Cmd: &metapb.Command_DeleteCronSchedule{DeleteCronSchedule: c}}
	case *metapb.TriggerCronSchedule:
		return &metapb.Command{Cmd: &metapb.Command_TriggerCronSchedule{TriggerCronSchedule: c}}
	case *metapb.RecordCronFire:
		return &metapb.Command{Cmd: &metapb.Command_RecordCronFire{RecordCronFire: c}}
	}
	panic("not a cron command")
}

func cronCode(t *testing.T, what string, res *metapb.Result, want metapb.Code) {
	t.Helper()
	if res.GetCode() != want {
		t.Fatalf("%s: %v %q, want %v", what, res.GetCode(), res.GetMessage(), want)
	}
}

func TestFSM_CronLifecycle(t *testing.T) {
	f := NewFSM(nil)
	cronCode(t, "create", applyAt(t, f, 1, 1000, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("tick")})), metapb.Code_CODE_OK)
	cronCode(t, "retried create", applyAt(t, f, 2, 2000, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("tick")})), metapb.Code_CODE_OK)
	other := cronDef("tick")
	other.Spec = "@every 2s"
	cronCode(t, "create with another spec", applyAt(t, f, 3, 3000, cronCmd(&metapb.CreateCronSchedule{Schedule: other})), metapb.Code_CODE_EXISTS)
	s, _ := f.CronSchedule("tick")
	if s.GetId() != 1 || s.GetCreatedMs() != 1000 || s.GetAfterMs() != 1000 {
		t.Fatalf("created %v", s)
	}

	// Records settle slots once, in order; a repeat or an older one
	// changes no counter.
	rec := &metapb.RecordCronFire{Name: "tick", Id: 1, SlotMs: 5000, Fired: 3, Skipped: 1}
	cronCode(t, "record", applyAt(t, f, 4, 5100, cronCmd(rec)), metapb.Code_CODE_OK)
	cronCode(t, "record again", applyAt(t, f, 5, 5200, cronCmd(rec)), metapb.Code_CODE_OK)
	cronCode(t, "older record", applyAt(t, f, 6, 5300, cronCmd(&metapb.RecordCronFire{Name: "tick", Id: 1, SlotMs: 4000, Fired: 1})), metapb.Code_CODE_OK)
	s, _ = f.CronSchedule("tick")
	if s.GetLastSlotMs() != 5000 || s.GetFired() != 3 || s.GetSkipped() != 1 {
		t.Fatalf("after records: %v", s)
	}

	// Triggers: requested by the API, fired by the firer, never more
	// fired than requested.
	cronCode(t, "trigger", applyAt(t, f, 7, 6000, cronCmd(&metapb.TriggerCronSchedule{Name: "tick"})), metapb.Code_CODE_OK)
	cronCode(t, "record trigger", applyAt(t, f, 8, 6100, cronCmd(&metapb.RecordCronFire{Name: "tick", Id: 1, TriggersFired: 5})), metapb.Code_CODE_OK)
	s, _ = f.CronSchedule("tick")
	if s.GetTriggersRequested() != 1 || s.GetTriggersFired() != 1 || s.GetLastSlotMs() != 5000 {
		t.Fatalf("after trigger: %v", s)
	}

	// Pause, then resume: slots of the pause never fire.
	cronCode(t, "pause", applyAt(t, f, 9, 7000, cronCmd(&metapb.SetCronPaused{Name: "tick", Paused: true})), metapb.Code_CODE_OK)
	cronCode(t, "resume", applyAt(t, f, 10, 9000, cronCmd(&metapb.SetCronPaused{Name: "tick"})), metapb.Code_CODE_OK)
	s, _ = f.CronSchedule("tick")
	if s.GetPaused() || s.GetAfterMs() != 9000 {
		t.Fatalf("after resume: %v", s)
	}

	// Deleted and recreated: a new id, and the old id's records miss.
	cronCode(t, "delete", applyAt(t, f, 11, 10000, cronCmd(&metapb.DeleteCronSchedule{Name: "tick"})), metapb.Code_CODE_OK)
	cronCode(t, "delete again", applyAt(t, f, 12, 10000, cronCmd(&metapb.DeleteCronSchedule{Name: "tick"})), metapb.Code_CODE_NOT_FOUND)
	cronCode(t, "recreate", applyAt(t, f, 13, 11000, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("tick")})), metapb.Code_CODE_OK)
	cronCode(t, "stale record", applyAt(t, f, 14, 12000, cronCmd(&metapb.RecordCronFire{Name: "tick", Id: 1, SlotMs: 20000, Fired: 1})), metapb.Code_CODE_NOT_FOUND)
	s, _ = f.CronSchedule("tick")
	if s.GetId() != 2 || s.GetLastSlotMs() != 0 || s.GetFired() != 0 {
		t.Fatalf("recreated %v", s)
	}
	for i, c := range []any{&metapb.SetCronPaused{Name: "nope"}, &metapb.TriggerCronSchedule{Name: "nope"}} {
		cronCode(t, "unknown schedule", applyAt(t, f, uint64(15+i), 13000, cronCmd(c)), metapb.Code_CODE_NOT_FOUND)
	}
}

func TestFSM_CronSurvivesSnapshot(t *testing.T) {
	f := NewFSM(nil)
	applyAt(t, f, 1, 1000, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("b")}))
	applyAt(t, f, 2, 2000, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("a")}))
	applyAt(t, f, 3, 3000, cronCmd(&metapb.RecordCronFire{Name: "b", Id: 1, SlotMs: 2500, Fired: 2}))
	applyAt(t, f, 4, 3000, cronCmd(&metapb.DeleteCronSchedule{Name: "a"}))
	g := restoredCopy(t, f)
	got := g.CronSchedules()
	if len(got) != 1 || !proto.Equal(got[0], f.CronSchedules()[0]) {
		t.Fatalf("restored %v, want %v", got, f.CronSchedules())
	}
	// The id counter travels too: ids are never reused.
	applyAt(t, g, 5, 4000, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("c")}))
	if c, _ := g.CronSchedule("c"); c.GetId() != 3 {
		t.Fatalf("id after restore %d, want 3", c.GetId())
	}
}

func TestFSM_CronLimits(t *testing.T) {
	f := NewFSM(nil)
	for i := range MaxCronSchedules {
		cronCode(t, "create", applyAt(t, f, uint64(i+1), 1, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("s" + itoa(i))})), metapb.Code_CODE_OK)
	}
	cronCode(t, "one more", applyAt(t, f, MaxCronSchedules+1, 1, cronCmd(&metapb.CreateCronSchedule{Schedule: cronDef("last")})), metapb.Code_CODE_REFUSED)
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestValidateCronSchedule(t *testing.T) {
	bad := map[string]func(s *metapb.CronSchedule){
		"empty name":    func(s *metapb.CronSchedule) { s.Name = "" },
		"name chars":    func(s *metapb.CronSchedule) { s.Name = "a b" },
		"long name":     func(s *metapb.CronSchedule) { s.Name = strings.Repeat("n", MaxCronNameLen+1) },
		"spec":          func(s *metapb.CronSchedule) { s.Spec = "* * *" },
		"zone":          func(s *metapb.CronSchedule) { s.TimeZone = "Nowhere/Else" },
		"queue":         func(s *metapb.CronSchedule) { s.Queue = "" },
		"body":          func(s *metapb.CronSchedule) { s.Body = make([]byte, MaxCronBodyBytes+1) },
		"reserved attr": func(s *metapb.CronSchedule) { s.Attributes = map[string]string{CronAttrSlot: "1"} },
		"catch up zero": func(s *metapb.CronSchedule) { s.Misfire = metapb.CronMisfire_CRON_MISFIRE_CATCH_UP },
		"catch up high": func(s *metapb.CronSchedule) {
			s.Misfire, s.CatchUpMax = metapb.CronMisfire_CRON_MISFIRE_CATCH_UP, MaxCronCatchUp+1
		},
		"catch up on skip": func(s *metapb.CronSchedule) { s.Misfire, s.CatchUpMax = metapb.CronMisfire_CRON_MISFIRE_SKIP, 3 },
		"misfire":          func(s *metapb.CronSchedule) { s.Misfire = 9 },
		"grace":            func(s *metapb.CronSchedule) { s.MisfireGraceMs = -1 },
		"grace high":       func(s *metapb.CronSchedule) { s.MisfireGraceMs = MaxCronGrace.Milliseconds() + 1 },
	}
	for name, mod := range bad {
		s := cronDef("x")
		mod(s)
		if err := ValidateCronSchedule(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := cronDef("x")
	ok.Misfire, ok.CatchUpMax, ok.TimeZone = metapb.CronMisfire_CRON_MISFIRE_CATCH_UP, MaxCronCatchUp, "Europe/Berlin"
	if err := ValidateCronSchedule(ok); err != nil {
		t.Errorf("valid schedule refused: %v", err)
	}
}

func TestCronSlotMessage(t *testing.T) {
	s := cronDef("tick")
	s.Id, s.TimeZone, s.Attributes = 7, "Europe/Berlin", map[string]string{"k": "v"}
	s.Body = []byte("{{schedule}} at {{slot}} ({{slot_ms}})")
	slot := time.UnixMilli(1_800_000_000_000)
	m := CronSlotMessage(s, slot)
	if m.GetDedupKey() != "cron:7:1800000000000" || m.GetAttributes()[CronAttrSlot] != "1800000000000" ||
		m.GetAttributes()["k"] != "v" || m.GetAttributes()[CronAttrSchedule] != "tick" {
		t.Fatalf("message %v", m)
	}
	if want := "tick at 2027-01-15T09:00:00+01:00 (1800000000000)"; string(m.GetBody()) != want {
		t.Fatalf("body %q, want %q", m.GetBody(), want)
	}
	if tm := CronTriggerMessage(s, 3, slot); tm.GetDedupKey() != "cron:7:t3" || tm.GetAttributes()[CronAttrTrigger] != "3" {
		t.Fatalf("trigger message %v", tm)
	}
	if s.GetAttributes()[CronAttrSlot] != "" {
		t.Fatal("the schedule's attributes were changed")
	}
}

// Apply's check of a schedule does not depend on the node's zone files:
// a well-formed zone name this node does not know is refused at the API
// and applied by every replica alike; a malformed one is refused by both.
func TestCronApplyIgnoresTheNodesZones(t *testing.T) {
	unknown := cronDef("mars")
	unknown.TimeZone = "Mars/Olympus_Mons"
	if err := ValidateCronSchedule(unknown); err == nil {
		t.Fatal("the API accepted a zone this node cannot load")
	}
	f := NewFSM(nil)
	cronCode(t, "apply unknown zone", applyAt(t, f, 1, 1000, cronCmd(&metapb.CreateCronSchedule{Schedule: unknown})), metapb.Code_CODE_OK)
	bad := cronDef("bad")
	bad.TimeZone = "Europe/Berlin; DROP"
	cronCode(t, "apply malformed zone", applyAt(t, f, 2, 1000, cronCmd(&metapb.CreateCronSchedule{Schedule: bad})), metapb.Code_CODE_INVALID)
}
