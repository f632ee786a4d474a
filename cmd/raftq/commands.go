package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
)

// action is a parsed, validated command ready to run against the cluster.
type action func(ctx context.Context, c *client.Client, o *output) error

// binder validates positional arguments once flags are parsed.
type binder func(pos []string) (action, error)

type command struct {
	path    string // "queue create"
	args    string // positional arguments, for usage
	summary string
	setup   func(a *app, fs *flag.FlagSet) binder
}

// usageError is bad command-line input: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exactly checks the number of positional arguments.
func exactly(pos []string, names ...string) error {
	if len(pos) != len(names) {
		return usagef("want %d argument(s) %s, got %d", len(names), strings.Join(names, " "), len(pos))
	}
	for i, p := range pos {
		if p == "" {
			return usagef("%s is empty", names[i])
		}
	}
	return nil
}

func commands() []command {
	return []command{
		{"cluster status", "", "show members and shard leaders", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					st, err := c.Status(ctx)
					if err != nil {
						return err
					}
					return o.status(st)
				}, nil
			}
		}},
		{"cluster repair", "NODE", "remove NODE's damaged replicas from their raft groups and re-add them empty (docs/operations.md)", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NODE"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					rs, err := c.Repair(ctx, pos[0])
					if err != nil {
						return err
					}
					return o.repairs(pos[0], rs)
				}, nil
			}
		}},
		queueCreateOrUpdate("create"),
		{"queue list", "", "list queues", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					qs, err := c.ListQueues(ctx)
					if err != nil {
						return err
					}
					return o.queues(qs)
				}, nil
			}
		}},
		queueByName("get", "show a queue's policy", func(ctx context.Context, c *client.Client, o *output, name string) error {
			q, err := c.GetQueue(ctx, name)
			if err != nil {
				return err
			}
			return o.queue(q)
		}),
		queueCreateOrUpdate("update"),
		queueByName("delete", "delete a queue and its messages", func(ctx context.Context, c *client.Client, o *output, name string) error {
			if err := c.DeleteQueue(ctx, name); err != nil {
				return err
			}
			return o.done(fmt.Sprintf("deleted queue %q", name), map[string]any{"deleted": name})
		}),
		queueByName("purge", "remove every ready and delayed message", func(ctx context.Context, c *client.Client, o *output, name string) error {
			n, err := c.PurgeQueue(ctx, name)
			if err != nil {
				return err
			}
			return o.done(fmt.Sprintf("purged %d message(s) from %q", n, name), map[string]any{"purged": n})
		}),
		queueByName("stats", "count messages by state", func(ctx context.Context, c *client.Client, o *output, name string) error {
			st, err := c.Stats(ctx, name)
			if err != nil {
				return err
			}
			return o.stats(st)
		}),
		sendCommand(),
		receiveCommand(),
		{"ack", "RECEIPT...", "acknowledge leased messages", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if len(pos) == 0 {
					return nil, usagef("want at least one RECEIPT")
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					itemErrs, err := c.Ack(ctx, pos...)
					if perr := o.acks(pos, itemErrs); perr != nil {
						return perr
					}
					if err != nil {
						return err
					}
					return errors.Join(itemErrs...)
				}, nil
			}
		}},
		nackCommand(),
		{"extend", "RECEIPT DURATION", "extend a lease to DURATION from now", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "RECEIPT", "DURATION"); err != nil {
					return nil, err
				}
				d, err := time.ParseDuration(pos[1])
				if err != nil || d <= 0 {
					return nil, usagef("DURATION %q is not a positive duration like 30s", pos[1])
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					dl, err := c.Extend(ctx, pos[0], d)
					if err != nil {
						return err
					}
					return o.done("lease until "+dl.UTC().Format(time.RFC3339Nano), map[string]any{"lease_deadline": dl.UTC().Format(time.RFC3339Nano)})
				}, nil
			}
		}},
		{"message get", "ID", "show a message's record and history", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "ID"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					m, err := c.GetMessage(ctx, pos[0])
					if err != nil {
						return err
					}
					return o.message(m)
				}, nil
			}
		}},
		{"message cancel", "ID", "remove a ready or delayed message", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "ID"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					if err := c.Cancel(ctx, pos[0]); err != nil {
						return err
					}
					return o.done("cancelled "+pos[0], map[string]any{"cancelled": pos[0]})
				}, nil
			}
		}},
		{"dlq list", "QUEUE", "list dead messages", func(a *app, fs *flag.FlagSet) binder {
			limit := fs.Int("limit", 0, "most messages to list (server default 100)")
			return func(pos []string) (action, error) {
				if err := exactly(pos, "QUEUE"); err != nil {
					return nil, err
				}
				if *limit < 0 {
					return nil, usagef("--limit %d is negative", *limit)
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					ms, err := c.ListDead(ctx, pos[0], *limit)
					if err != nil {
						return err
					}
					return o.dead(ms)
				}, nil
			}
		}},
		{"dlq redrive", "QUEUE", "move dead messages back to ready (rate-limited)", func(a *app, fs *flag.FlagSet) binder {
			var ids listFlag
			fs.Var(&ids, "ids", "message ids, comma-separated or repeated (default: all)")
			rate := fs.Int("rate", 0, "messages per second, 1-500 (server default 100)")
			return func(pos []string) (action, error) {
				if err := exactly(pos, "QUEUE"); err != nil {
					return nil, err
				}
				if *rate < 0 || *rate > 500 {
					return nil, usagef("--rate %d outside 1-500", *rate)
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					n, err := c.Redrive(ctx, pos[0], client.RedriveOptions{IDs: ids, Rate: *rate})
					if err != nil {
						return err
					}
					return o.done(fmt.Sprintf("redrove %d message(s)", n), map[string]any{"redriven": n})
				}, nil
			}
		}},
		{"dlq discard", "QUEUE", "delete dead messages", func(a *app, fs *flag.FlagSet) binder {
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
		}},
	}
}

func queueByName(verb, summary string, run func(ctx context.Context, c *client.Client, o *output, name string) error) command {
	return command{"queue " + verb, "NAME", summary, func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos, "NAME"); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error { return run(ctx, c, o, pos[0]) }, nil
		}
	}}
}

// queueCreateOrUpdate: create sends the flags given (unset ones take server
// defaults); update reads the policy and changes only the flags given.
func queueCreateOrUpdate(verb string) command {
	summary := "create a queue (idempotent for the same policy)"
	if verb == "update" {
		summary = "change the given policy fields of a queue"
	}
	return command{"queue " + verb, "NAME", summary, func(a *app, fs *flag.FlagSet) binder {
		var p policyFlags
		p.register(fs)
		return func(pos []string) (action, error) {
			if err := exactly(pos, "NAME"); err != nil {
				return nil, err
			}
			var probe client.QueueOptions
			if err := p.apply(fs, &probe); err != nil {
				return nil, usagef("%v", err)
			}
			name := pos[0]
			return func(ctx context.Context, c *client.Client, o *output) error {
				var opts client.QueueOptions
				if verb == "update" {
					cur, err := c.GetQueue(ctx, name)
					if err != nil {
						return err
					}
					opts = cur.Options
				}
				if err := p.apply(fs, &opts); err != nil {
					return usagef("%v", err)
				}
				var (
					q   client.QueueInfo
					err error
				)
				if verb == "update" {
					q, err = c.UpdateQueue(ctx, name, opts)
				} else {
					q, err = c.CreateQueue(ctx, name, opts)
				}
				if err != nil {
					return err
				}
				return o.queue(q)
			}, nil
		}
	}}
}

func sendCommand() command {
	return command{"send", "QUEUE BODY", `enqueue a message (BODY "-" reads stdin)`, func(a *app, fs *flag.FlagSet) binder {
		group := fs.String("group", "", "message group (FIFO order, shard placement)")
		dedup := fs.String("dedup", "", "dedup key")
		delay := fs.Duration("delay", 0, "hide the message for this long")
		runAt := fs.String("run-at", "", "hide the message until this RFC 3339 time")
		prio := fs.Uint("priority", 0, "priority 0-9, higher first")
		typ := fs.String("type", "", "message type (worker dispatch)")
		attrs := mapFlag{}
		fs.Var(attrs, "attr", "attribute key=value (repeatable)")
		return func(pos []string) (action, error) {
			if len(pos) != 2 || pos[0] == "" {
				return nil, usagef("want 2 argument(s) QUEUE BODY, got %d", len(pos))
			}
			opts := []client.SendOption{client.Group(*group), client.DedupKey(*dedup), client.Type(*typ)}
			if *prio > 9 {
				return nil, usagef("--priority %d outside 0-9", *prio)
			}
			opts = append(opts, client.Priority(uint32(*prio)))
			if *delay < 0 {
				return nil, usagef("--delay %v is negative", *delay)
			}
			if *delay > 0 && *runAt != "" {
				return nil, usagef("give --delay or --run-at, not both")
			}
			opts = append(opts, client.Delay(*delay))
			if *runAt != "" {
				t, err := time.Parse(time.RFC3339, *runAt)
				if err != nil {
					return nil, usagef("--run-at %q is not an RFC 3339 time like 2025-01-02T15:04:05Z", *runAt)
				}
				opts = append(opts, client.RunAt(t))
			}
			if len(attrs) > 0 {
				opts = append(opts, client.Attributes(attrs))
			}
			body := []byte(pos[1])
			if pos[1] == "-" {
				var err error
				if body, err = io.ReadAll(a.stdin); err != nil {
					return nil, fmt.Errorf("read body from stdin: %w", err)
				}
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				r, err := c.Send(ctx, pos[0], body, opts...)
				if err != nil {
					return err
				}
				return o.sent(r)
			}, nil
		}
	}}
}

func receiveCommand() command {
	return command{"receive", "QUEUE", "lease messages (prints id, receipt, body)", func(a *app, fs *flag.FlagSet) binder {
		n := fs.Int("max", 1, "most messages, 1-1000")
		wait := fs.Duration("wait", 0, "long-poll up to this long (max 20s)")
		vis := fs.Duration("visibility", 0, "lease length (default: the queue's)")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "QUEUE"); err != nil {
				return nil, err
			}
			switch {
			case *n < 1 || *n > 1000:
				return nil, usagef("--max %d outside 1-1000", *n)
			case *wait < 0 || *wait > 20*time.Second:
				return nil, usagef("--wait %v outside 0-20s", *wait)
			case *vis < 0:
				return nil, usagef("--visibility %v is negative", *vis)
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				ms, err := c.Receive(ctx, pos[0], client.ReceiveOptions{Max: *n, Wait: *wait, Visibility: *vis, Consumer: "raftq-cli"})
				if err != nil {
					return err
				}
				return o.received(ms)
			}, nil
		}
	}}
}

func nackCommand() command {
	return command{"nack", "RECEIPT", "give a leased message back", func(a *app, fs *flag.FlagSet) binder {
		delay := fs.Duration("delay", 0, "ready again after this long (default: the queue's backoff)")
		text := fs.String("error", "", "error text recorded with the message")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "RECEIPT"); err != nil {
				return nil, err
			}
			opts := client.NackOptions{Error: *text}
			set := false
			fs.Visit(func(f *flag.Flag) { set = set || f.Name == "delay" })
			if set {
				if *delay < 0 {
					return nil, usagef("--delay %v is negative", *delay)
				}
				opts.Delay = delay
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				if err := c.Nack(ctx, pos[0], opts); err != nil {
					return err
				}
				return o.done("nacked", map[string]any{"nacked": pos[0]})
			}, nil
		}
	}}
}
