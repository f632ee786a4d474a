package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/raftq/raftq/client"
)

// The dead-letter commands (docs/jobs.md, "Dead letters").

// deadFilterFlags select dead messages by type, error text and death time.
type deadFilterFlags struct {
	typ, errText, since, until string
}

func (f *deadFilterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.typ, "type", "", "only messages of this type")
	fs.StringVar(&f.errText, "error", "", "only messages whose last error contains this text")
	fs.StringVar(&f.since, "since", "", "only messages that died at or after this: an RFC 3339 time or a duration ago (24h)")
	fs.StringVar(&f.until, "until", "", "only messages that died before this: an RFC 3339 time or a duration ago")
}

// filter is the filter the flags give, nil when none is set.
func (f *deadFilterFlags) filter(now time.Time) (*client.DeadFilter, error) {
	if f.typ == "" && f.errText == "" && f.since == "" && f.until == "" {
		return nil, nil
	}
	out := &client.DeadFilter{Type: f.typ, ErrorContains: f.errText}
	var err error
	if out.Since, err = pointInTime("since", f.since, now); err != nil {
		return nil, err
	}
	if out.Until, err = pointInTime("until", f.until, now); err != nil {
		return nil, err
	}
	if !out.Since.IsZero() && !out.Until.IsZero() && !out.Until.After(out.Since) {
		return nil, usagef("--until %s is not after --since %s", f.until, f.since)
	}
	return out, nil
}

// pointInTime reads an RFC 3339 time or a positive duration before now;
// "" is the zero time.
func pointInTime(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, usagef("--%s %q is neither an RFC 3339 time like 2025-01-02T15:04:05Z nor a positive duration like 24h", name, v)
	}
	return now.Add(-d), nil
}

// retryFlags are send's per-message retry policy.
type retryFlags struct {
	maxReceives             uint
	backoffBase, backoffMax time.Duration
}

func (r *retryFlags) register(fs *flag.FlagSet) {
	fs.UintVar(&r.maxReceives, "max-receives", 0, "dead-letter this message at this many receives, 1-1000 (default: the queue's)")
	fs.DurationVar(&r.backoffBase, "backoff-base", 0, "this message's nack backoff base (default: the queue's)")
	fs.DurationVar(&r.backoffMax, "backoff-max", 0, "this message's nack backoff cap (default: the queue's)")
}

func (r *retryFlags) options(fs *flag.FlagSet) ([]client.SendOption, error) {
	var opts []client.SendOption
	if given(fs, "max-receives") {
		if r.maxReceives == 0 || r.maxReceives > client.MaxReceives {
			return nil, usagef("--max-receives %d outside 1-%d", r.maxReceives, client.MaxReceives)
		}
		opts = append(opts, client.MaxAttempts(uint32(r.maxReceives)))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"backoff-base", r.backoffBase}, {"backoff-max", r.backoffMax}} {
		if given(fs, f.name) {
			if err := durationWithin(f.name, f.d, client.MaxDelay, false, "the queue's"); err != nil {
				return nil, err
			}
		}
	}
	if r.backoffMax > 0 && r.backoffMax < r.backoffBase {
		return nil, usagef("--backoff-max %v is below --backoff-base %v", r.backoffMax, r.backoffBase)
	}
	if r.backoffBase > 0 || r.backoffMax > 0 {
		opts = append(opts, client.Backoff(r.backoffBase, r.backoffMax))
	}
	return opts, nil
}

func dlqListCommand() command {
	return command{"dlq list", "QUEUE", "list dead messages", func(a *app, fs *flag.FlagSet) binder {
		limit := fs.Int("limit", 0, "most messages to list (server default 100)")
		page := fs.String("page-token", "", "list the page after the one that printed this token")
		var ff deadFilterFlags
		ff.register(fs)
		return func(pos []string) (action, error) {
			if err := exactly(pos, "QUEUE"); err != nil {
				return nil, err
			}
			if *limit < 0 {
				return nil, usagef("--limit %d is negative", *limit)
			}
			filter, err := ff.filter(time.Now())
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				ms, next, err := c.ListDeadMatching(ctx, pos[0], filter, *limit, *page)
				if err != nil {
					return err
				}
				if err := o.dead(ms); err != nil {
					return err
				}
				if next != "" && !o.json {
					// On stderr, so the table on stdout stays one table.
					// The filter flags must come again with the token.
					fmt.Fprintf(a.stderr, "more: raftq dlq list %s --page-token %s (with the same filter flags)\n", pos[0], next)
				}
				return nil
			}, nil
		}
	}, false}
}

func dlqRedriveCommand() command {
	return command{"dlq redrive", "QUEUE", "move dead messages back to ready, or to another queue (rate-limited)", func(a *app, fs *flag.FlagSet) binder {
		var ids listFlag
		fs.Var(&ids, "ids", "message ids, comma-separated or repeated (default: all that the filter flags match)")
		rate := fs.Int("rate", 0, "messages per second, 1-500 (server default 100)")
		to := fs.String("to", "", "move the messages to this queue instead (idempotent: safe to run again)")
		dry := fs.Bool("dry-run", false, "move nothing; list what would move and count it")
		var ff deadFilterFlags
		ff.register(fs)
		return func(pos []string) (action, error) {
			if err := exactly(pos, "QUEUE"); err != nil {
				return nil, err
			}
			if *rate < 0 || *rate > 500 {
				return nil, usagef("--rate %d outside 1-500", *rate)
			}
			if *to == pos[0] {
				return nil, usagef("--to %s is the queue itself: leave --to out to redrive in place", *to)
			}
			filter, err := ff.filter(time.Now())
			if err != nil {
				return nil, err
			}
			if filter != nil && len(ids) > 0 {
				return nil, usagef("give --ids or filter flags, not both")
			}
			opts := client.RedriveOptions{IDs: ids, Rate: *rate, Target: *to, Filter: filter}
			return func(ctx context.Context, c *client.Client, o *output) error {
				if *dry {
					plan, err := c.RedriveDryRun(ctx, pos[0], opts)
					if err != nil {
						return err
					}
					if o.json {
						out := make([]map[string]any, len(plan.Messages))
						for i, m := range plan.Messages {
							out[i] = messageJSON(m)
						}
						return o.emit(map[string]any{"matched": plan.Matched, "would_move": out})
					}
					if err := o.dead(plan.Messages); err != nil {
						return err
					}
					fmt.Fprintf(a.stderr, "dry run: %d message(s) would move\n", plan.Matched)
					return nil
				}
				n, err := c.Redrive(ctx, pos[0], opts)
				if err != nil {
					return err
				}
				where := ""
				if *to != "" {
					where = " to " + *to
				}
				return o.done(fmt.Sprintf("redrove %d message(s)%s", n, where), map[string]any{"redriven": n})
			}, nil
		}
	}, false}
}

func dlqDiscardCommand() command {
	return command{"dlq discard", "QUEUE", "delete dead messages", func(a *app, fs *flag.FlagSet) binder {
		var ids listFlag
		fs.Var(&ids, "ids", "message ids, comma-separated or repeated (default: all)")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "QUEUE"); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				n, err := c.Discard(ctx, pos[0], ids...)
				if err != nil {
					return err
				}
				return o.done(fmt.Sprintf("discarded %d message(s)", n), map[string]any{"discarded": n})
			}, nil
		}
	}, false}
}
