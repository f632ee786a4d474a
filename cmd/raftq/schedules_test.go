package main

import (
	"strings"
	"testing"
)

// Schedule flags are checked before dialling, in flag names.
func TestScheduleUsageErrors(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "create", "s", "--cron", "@every 1m"}, "--queue and --cron are required"},
		{[]string{"schedule", "create", "s", "--queue", "q"}, "--queue and --cron are required"},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "* * *"}, "has 3 fields, want 5"},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "61 * * * *"}, "61 is outside 0-59"},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "@every 100ms"}, "want whole seconds"},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "@daily", "--tz", "Mars/Base"}, `unknown time zone "Mars/Base"`},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "@daily", "--misfire", "later"}, `--misfire "later": want fire-once, skip or catch-up`},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "@daily", "--misfire", "catch-up"}, "--catch-up N goes with --misfire catch-up"},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "@daily", "--catch-up", "3"}, "--catch-up N goes with --misfire catch-up"},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "@daily", "--misfire", "catch-up", "--catch-up", "1001"}, "--catch-up 1001 is above 1000"},
		{[]string{"schedule", "create", "s", "--queue", "q", "--cron", "@daily", "--grace", "25h"}, "--grace 25h0m0s is above the limit 24h0m0s"},
		{[]string{"schedule", "pause"}, "want 1 argument(s) NAME, got 0"},
		{[]string{"schedule", "list", "x"}, "want 0 argument(s)"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := raftq(t, nowhere, "", c.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", r.code, r.stderr, exitUsage, c.want)
			}
		})
	}
}
