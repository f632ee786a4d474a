package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/cron"
)

var misfireNames = map[string]client.Misfire{
	"fire-once": client.MisfireFireOnce,
	"skip":      client.MisfireSkip,
	"catch-up":  client.MisfireCatchUp,
}

func misfireName(m client.Misfire) string {
	for k, v := range misfireNames {
		if v == m {
			return k
		}
	}
	return strconv.Itoa(int(m))
}

func scheduleJSON(s client.Schedule) map[string]any {
	return map[string]any{
		"name": s.Name, "cron": s.Spec, "time_zone": s.TimeZone, "queue": s.Queue, "body": string(s.Body),
		"attributes": s.Attributes, "type": s.Type, "group_id": s.GroupID, "misfire": misfireName(s.Misfire),
		"catch_up_max": s.CatchUpMax, "grace_ms": s.Grace.Milliseconds(), "paused": s.Paused, "id": s.ID,
		"created": ts(s.Created), "next_fire": ts(s.NextFire), "last_slot": ts(s.LastSlot),
		"fired": s.Fired, "skipped": s.Skipped, "triggers_requested": s.TriggersRequested, "triggers_fired": s.TriggersFired,
	}
}

func (o *output) schedule(s client.Schedule) error {
	if o.json {
		return o.emit(scheduleJSON(s))
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	misfire := misfireName(s.Misfire)
	if s.Misfire == client.MisfireCatchUp {
		misfire += fmt.Sprintf(" (at most %d)", s.CatchUpMax)
	}
	grace := s.Grace
	if grace == 0 {
		grace = cron.DefaultGrace
	}
	return o.table("FIELD\tVALUE", [][]string{
		{"name", s.Name}, {"cron", s.Spec}, {"time-zone", dash(s.TimeZone)}, {"queue", s.Queue},
		{"body", printable(s.Body)}, {"type", dash(s.Type)}, {"group", dash(s.GroupID)},
		{"misfire", misfire}, {"grace", grace.String()}, {"paused", strconv.FormatBool(s.Paused)},
		{"created", ts(s.Created)}, {"next-fire", dash(ts(s.NextFire))}, {"last-slot", dash(ts(s.LastSlot))},
		{"fired", u(s.Fired)}, {"skipped", u(s.Skipped)}, {"triggers", u(s.TriggersFired) + "/" + u(s.TriggersRequested)},
	})
}

func (o *output) schedules(list []client.Schedule) error {
	if o.json {
		out := make([]map[string]any, len(list))
		for i, s := range list {
			out[i] = scheduleJSON(s)
		}
		return o.emit(out)
	}
	rows := make([][]string, len(list))
	for i, s := range list {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		rows[i] = []string{s.Name, s.Spec, dash(s.TimeZone), s.Queue, state, dash(ts(s.NextFire)),
			strconv.FormatUint(s.Fired, 10), strconv.FormatUint(s.Skipped, 10)}
	}
	return o.table("NAME\tCRON\tZONE\tQUEUE\tSTATE\tNEXT FIRE\tFIRED\tSKIPPED", rows)
}

func scheduleByName(verb, summary string, run func(c *client.Client, ctx context.Context, name string) (client.Schedule, error)) command {
	return command{"schedule " + verb, "NAME", summary, func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos, "NAME"); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				s, err := run(c, ctx, pos[0])
				if err != nil {
					return err
				}
				return o.schedule(s)
			}, nil
		}
	}, false}
}

func scheduleCommands() []command {
	return []command{
		{"schedule create", "NAME", "create a recurring job: a message on --queue at every slot of --cron, each slot once (idempotent for the same definition)", func(a *app, fs *flag.FlagSet) binder {
			var s client.Schedule
			var body, misfire string
			attrs := mapFlag{}
			fs.StringVar(&s.Queue, "queue", "", "the queue the messages go to (required; it must exist)")
			fs.StringVar(&s.Spec, "cron", "", `when: "MIN HOUR DOM MON DOW", @hourly, @daily, @weekly, @monthly, @yearly, or "@every 30s" (required)`)
			fs.StringVar(&s.TimeZone, "tz", "", "IANA time zone the cron fields are read in (default UTC)")
			fs.StringVar(&body, "body", "", "message body template; {{schedule}}, {{slot}} and {{slot_ms}} are replaced")
			fs.Var(attrs, "attr", "attribute key=value (repeatable)")
			fs.StringVar(&s.Type, "type", "", "message type")
			fs.StringVar(&s.GroupID, "group", "", "message group id (needed by FIFO queues)")
			fs.StringVar(&misfire, "misfire", "fire-once", "missed slots: fire-once (the latest), skip, or catch-up (the latest --catch-up)")
			catchUp := fs.Uint("catch-up", 0, "with --misfire catch-up: at most this many missed slots fire, 1-1000")
			fs.DurationVar(&s.Grace, "grace", 0, "how late a slot may fire before it counts as missed (default 1m, at most 24h)")
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				if s.Queue == "" || s.Spec == "" {
					return nil, usagef("--queue and --cron are required")
				}
				if _, err := cron.Parse(s.Spec, s.TimeZone); err != nil {
					return nil, usagef("--cron %q --tz %q: %v", s.Spec, s.TimeZone, err)
				}
				m, ok := misfireNames[misfire]
				if !ok {
					return nil, usagef("--misfire %q: want fire-once, skip or catch-up", misfire)
				}
				if (m == client.MisfireCatchUp) != (*catchUp > 0) {
					return nil, usagef("--catch-up N goes with --misfire catch-up, and only with it")
				}
				if *catchUp > 1000 {
					return nil, usagef("--catch-up %d is above 1000", *catchUp)
				}
				if err := durationWithin("grace", s.Grace, 24*time.Hour, true, ""); err != nil {
					return nil, err
				}
				s.Name, s.Body, s.Misfire, s.CatchUpMax = pos[0], []byte(body), m, uint32(*catchUp)
				if len(attrs) > 0 {
					s.Attributes = attrs
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					got, err := c.CreateSchedule(ctx, s)
					if err != nil {
						return err
					}
					return o.schedule(got)
				}, nil
			}
		}, false},
		{"schedule list", "", "list schedules with their next fire times", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					list, err := c.ListSchedules(ctx)
					if err != nil {
						return err
					}
					return o.schedules(list)
				}, nil
			}
		}, false},
		scheduleByName("get", "show a schedule, its next fire time and what it fired", (*client.Client).GetSchedule),
		scheduleByName("pause", "stop a schedule firing", (*client.Client).PauseSchedule),
		scheduleByName("resume", "start a paused schedule again from now (slots of the pause never fire)", (*client.Client).ResumeSchedule),
		scheduleByName("trigger", "enqueue one extra message of a schedule now", (*client.Client).TriggerSchedule),
		{"schedule delete", "NAME", "delete a schedule (messages it sent stay queued)", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					if err := c.DeleteSchedule(ctx, pos[0]); err != nil {
						return err
					}
					return o.done("deleted schedule "+pos[0], map[string]any{"deleted": pos[0]})
				}, nil
			}
		}, false},
	}
}
