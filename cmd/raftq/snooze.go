package main

import (
	"context"
	"flag"

	"github.com/raftq/raftq/client"
)

// snoozeCommand hands a leased message back without using up an attempt
// (client.Snooze): for a job that cannot run yet, or one a worker gives up
// unprocessed.
func snoozeCommand() command {
	return command{"snooze", "RECEIPT", "give a leased message back after --delay without using up an attempt", func(a *app, fs *flag.FlagSet) binder {
		delay := fs.Duration("delay", 0, "ready again after this long (default 0s: at once)")
		reason := fs.String("reason", "", "text recorded in the message's history")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "RECEIPT"); err != nil {
				return nil, err
			}
			if err := durationWithin("delay", *delay, client.MaxDelay, true, ""); err != nil {
				return nil, err
			}
			if len(*reason) > client.MaxSnoozeReason {
				return nil, usagef("--reason of %d bytes is above the limit %d", len(*reason), client.MaxSnoozeReason)
			}
			opts := client.SnoozeOptions{Delay: *delay, Reason: *reason}
			return func(ctx context.Context, c *client.Client, o *output) error {
				if err := c.Snooze(ctx, pos[0], opts); err != nil {
					return err
				}
				return o.done("snoozed", map[string]any{"snoozed": pos[0], "delay_ms": delay.Milliseconds()})
			}, nil
		}
	}, false}
}
