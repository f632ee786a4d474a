package meta

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

// CronSlotKey is the dedup key of schedule s's message for the slot at
// slot: a new meta leader resending a slot its predecessor sent but did
// not record is deduplicated by the shard.
func CronSlotKey(s *metapb.CronSchedule, slot time.Time) string {
	return "cron:" + strconv.FormatUint(s.GetId(), 10) + ":" + strconv.FormatInt(slot.UnixMilli(), 10)
}

// CronTriggerKey is the dedup key of the message of manual trigger n.
func CronTriggerKey(s *metapb.CronSchedule, n uint64) string {
	return "cron:" + strconv.FormatUint(s.GetId(), 10) + ":t" + strconv.FormatUint(n, 10)
}

// CronSlotMessage is the message schedule s sends for slot, with its
// dedup key.
func CronSlotMessage(s *metapb.CronSchedule, slot time.Time) *fsmpb.NewMessage {
	m := cronMessage(s, CronSlotKey(s, slot), slot)
	m.Attributes[CronAttrSlot] = strconv.FormatInt(slot.UnixMilli(), 10)
	return m
}

// CronTriggerMessage is the message of manual trigger n, sent at now.
func CronTriggerMessage(s *metapb.CronSchedule, n uint64, now time.Time) *fsmpb.NewMessage {
	m := cronMessage(s, CronTriggerKey(s, n), now)
	m.Attributes[CronAttrTrigger] = strconv.FormatUint(n, 10)
	return m
}

func cronMessage(s *metapb.CronSchedule, key string, slot time.Time) *fsmpb.NewMessage {
	loc := time.UTC
	if l, err := time.LoadLocation(s.GetTimeZone()); err == nil {
		loc = l
	}
	return cronMessageIn(s, key, slot, loc)
}

// longestOffset renders {{slot}} at its longest ("+13:45" rather than
// "Z"): validation renders with it, the same on every replica whatever
// zones the node knows.
var longestOffset = time.FixedZone("", 13*3600+45*60)

func cronMessageIn(s *metapb.CronSchedule, key string, slot time.Time, loc *time.Location) *fsmpb.NewMessage {
	attrs := make(map[string]string, len(s.GetAttributes())+2)
	maps.Copy(attrs, s.GetAttributes())
	attrs[CronAttrSchedule] = s.GetName()
	body := strings.NewReplacer(
		"{{schedule}}", s.GetName(),
		"{{slot}}", slot.In(loc).Format(time.RFC3339),
		"{{slot_ms}}", strconv.FormatInt(slot.UnixMilli(), 10),
	).Replace(string(s.GetBody()))
	return &fsmpb.NewMessage{
		Body: []byte(body), Attributes: attrs, Type: s.GetType(), GroupId: s.GetGroupId(),
		DedupKey: key, DelayMs: -1, // the queue's default delay
	}
}
