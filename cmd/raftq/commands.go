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
	// offline commands need no cluster: their action gets a nil client.
	offline bool
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
	return append([]command{
		statusCommand(),
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
		}, false},
		{"cluster nodes", "", "list nodes: addresses, state, version, replicas and leaders held", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					ns, err := c.Nodes(ctx)
					if err != nil {
						return err
					}
					return o.nodes(ns)
				}, nil
			}
		}, false},
		removeNodeCommand(),
		replaceNodeCommand(),
		rebalanceCommand(),
		// Longer paths first: lookup takes the first command whose words
		// begin the line.
		shardsSetCommand(),
		shardsCommand(),
		backupCreateCommand(),
		backupVerifyCommand(),
		moveCancelCommand(),
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
		}, false},
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
		queueByName("pause", "stop deliveries: receives return nothing, sends are still accepted", func(ctx context.Context, c *client.Client, o *output, name string) error {
			q, err := c.PauseQueue(ctx, name)
			if err != nil {
				return err
			}
			return o.done(fmt.Sprintf("paused queue %q", q.Name), map[string]any{"name": q.Name, "paused": q.Paused})
		}),
		queueByName("resume", "resume deliveries of a paused queue", func(ctx context.Context, c *client.Client, o *output, name string) error {
			q, err := c.ResumeQueue(ctx, name)
			if err != nil {
				return err
			}
			return o.done(fmt.Sprintf("resumed queue %q", q.Name), map[string]any{"name": q.Name, "paused": q.Paused})
		}),
		sendCommand(),
		receiveCommand(),
		workCommand(),
		{"ack", "RECEIPT...", "acknowledge leased messages", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if len(pos) == 0 {
					return nil, usagef("want at least one RECEIPT")
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					err := c.AckBatch(ctx, pos)
					var be *client.BatchError
					if err != nil && !errors.As(err, &be) {
						return err
					}
					var errs []error
					if be != nil {
						errs = be.Errs
					}
					if perr := o.acks(pos, errs); perr != nil {
						return perr
					}
					if be != nil {
						// Each receipt's error is in the table: say it once.
						return &reportedError{err: err, msg: fmt.Sprintf("%d of %d receipt(s) not acked", be.Failed(), len(pos))}
					}
					return nil
				}, nil
			}
		}, false},
		ackResultCommand(),
		nackCommand(),
		snoozeCommand(),
		{"extend", "RECEIPT DURATION", "extend a lease to DURATION from now", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "RECEIPT", "DURATION"); err != nil {
					return nil, err
				}
				d, err := time.ParseDuration(pos[1])
				if err != nil || d <= 0 {
					return nil, usagef("DURATION %q is not a positive duration like 30s", pos[1])
				}
				if d > client.MaxVisibility {
					return nil, usagef("DURATION %v is above the limit %v", d, client.MaxVisibility)
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					dl, err := c.Extend(ctx, pos[0], d)
					if err != nil {
						return err
					}
					return o.done("lease until "+ts(dl), map[string]any{"lease_deadline": ts(dl)})
				}, nil
			}
		}, false},
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
		}, false},
		messageWaitCommand(),
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
		}, false},
		dlqListCommand(),
		dlqRedriveCommand(),
		dlqDiscardCommand(),
		completionCommand(),
	}, append(append(append(append(certsCommands(), keysCommands()...), tenantCommands()...), scheduleCommands()...), topicCommands()...)...)
}

func queueByName(verb, summary string, run func(ctx context.Context, c *client.Client, o *output, name string) error) command {
	return command{"queue " + verb, "NAME", summary, func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos, "NAME"); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error { return run(ctx, c, o, pos[0]) }, nil
		}
	}, false}
}

// queueCreateOrUpdate: create sends the flags given (unset ones take server
// defaults); update reads the policy and changes only the flags given.
func queueCreateOrUpdate(verb string) command {
	summary := "create a queue (idempotent for the same policy)"
	update := verb == "update"
	if update {
		summary = "change the given policy fields of a queue"
	}
	return command{"queue " + verb, "NAME", summary, func(a *app, fs *flag.FlagSet) binder {
		var p policyFlags
		p.register(fs, update)
		var qf quotaFlags
		qf.register(fs, false, update)
		return func(pos []string) (action, error) {
			if err := exactly(pos, "NAME"); err != nil {
				return nil, err
			}
			if err := p.check(fs, update); err != nil {
				return nil, err
			}
			if err := qf.check(); err != nil {
				return nil, err
			}
			name := pos[0]
			return func(ctx context.Context, c *client.Client, o *output) error {
				var opts client.QueueOptions
				if update {
					cur, err := c.GetQueue(ctx, name)
					if err != nil {
						return err
					}
					opts = cur.Options
				}
				p.apply(fs, &opts)
				qf.apply(fs, &opts.Quotas)
				var (
					q   client.QueueInfo
					err error
				)
				if update {
					q, err = c.UpdateQueue(ctx, name, opts)
				} else {
					q, err = c.CreateQueue(ctx, name, opts)
				}
				if errors.Is(err, client.ErrExists) {
					return &reportedError{err: err, msg: fmt.Sprintf("%s; raftq queue update %s changes it", message(err), name)}
				}
				if err != nil {
					return err
				}
				return o.queue(q)
			}, nil
		}
	}, false}
}

func sendCommand() command {
	return command{"send", "QUEUE BODY", `enqueue a message (BODY "-" reads stdin)`, func(a *app, fs *flag.FlagSet) binder {
		var sf sendFlags
		sf.register(fs)
		return func(pos []string) (action, error) {
			opts, body, err := sf.message(a, fs, pos, "QUEUE")
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				r, err := c.Send(ctx, pos[0], body, opts...)
				if err != nil {
					return err
				}
				return o.sent(r)
			}, nil
		}
	}, false}
}

// message reads the arguments of send and topic publish, TARGET BODY,
// with the message flags: the send options and the body.
func (sf *sendFlags) message(a *app, fs *flag.FlagSet, pos []string, target string) ([]client.SendOption, []byte, error) {
	if len(pos) != 2 || pos[0] == "" {
		return nil, nil, usagef("want 2 argument(s) %s BODY, got %d", target, len(pos))
	}
	opts, err := sf.options(fs)
	if err != nil {
		return nil, nil, err
	}
	body, err := a.body(pos[1])
	if err != nil {
		return nil, nil, err
	}
	return opts, body, nil
}

// sendFlags are the message flags of send and topic publish (a publish is
// a send to a topic).
type sendFlags struct {
	group, dedup, runAt, typ string
	uniqueFor, delay         time.Duration
	untilDone                bool
	prio                     uint
	attrs                    mapFlag
	retry                    retryFlags
}

func (s *sendFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.group, "group", "", "message group (FIFO order, shard placement)")
	fs.StringVar(&s.dedup, "dedup", "", "dedup key (a unique job's key)")
	fs.DurationVar(&s.uniqueFor, "unique-for", 0, "hold the dedup key this long instead of the queue's dedup window")
	fs.BoolVar(&s.untilDone, "unique-until-done", false, "hold the dedup key until the job is acked, dead-lettered or cancelled")
	fs.DurationVar(&s.delay, "delay", 0, "hide the message for this long (default: the queue's delay)")
	fs.StringVar(&s.runAt, "run-at", "", "hide the message until this RFC 3339 time")
	fs.UintVar(&s.prio, "priority", 0, "priority 0-9, higher first")
	fs.StringVar(&s.typ, "type", "", "message type (worker dispatch)")
	s.attrs = mapFlag{}
	fs.Var(s.attrs, "attr", "attribute key=value (repeatable)")
	s.retry.register(fs)
}

// options checks the flags given, before any call, and turns them into
// send options.
func (s *sendFlags) options(fs *flag.FlagSet) ([]client.SendOption, error) {
	opts := []client.SendOption{client.Group(s.group), client.DedupKey(s.dedup), client.Type(s.typ)}
	if s.uniqueFor != 0 || s.untilDone {
		if s.dedup == "" {
			return nil, usagef("--unique-for and --unique-until-done need --dedup KEY (the job's unique key)")
		}
		if given(fs, "unique-for") {
			if err := durationWithin("unique-for", s.uniqueFor, client.MaxRetention, false, "the queue's dedup window"); err != nil {
				return nil, err
			}
		}
		scopes := []client.UniqueScope{client.UniqueFor(s.uniqueFor)}
		if s.untilDone {
			scopes = append(scopes, client.UniqueUntilDone())
		}
		opts = append(opts, client.Unique(s.dedup, scopes...))
	}
	retryOpts, err := s.retry.options(fs)
	if err != nil {
		return nil, err
	}
	opts = append(opts, retryOpts...)
	if s.prio > 9 {
		return nil, usagef("--priority %d outside 0-9", s.prio)
	}
	opts = append(opts, client.Priority(uint32(s.prio)))
	if given(fs, "delay") {
		if err := durationWithin("delay", s.delay, client.MaxDelay, false, "the queue's delay"); err != nil {
			return nil, err
		}
	}
	if s.delay > 0 && s.runAt != "" {
		return nil, usagef("give --delay or --run-at, not both")
	}
	opts = append(opts, client.Delay(s.delay))
	if s.runAt != "" {
		t, err := time.Parse(time.RFC3339, s.runAt)
		if err != nil {
			return nil, usagef("--run-at %q is not an RFC 3339 time like 2025-01-02T15:04:05Z", s.runAt)
		}
		opts = append(opts, client.RunAt(t))
	}
	if len(s.attrs) > 0 {
		opts = append(opts, client.Attributes(s.attrs))
	}
	return opts, nil
}

// body is a BODY argument: itself, or stdin for "-".
func (a *app) body(arg string) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	b, err := io.ReadAll(a.stdin)
	if err != nil {
		return nil, fmt.Errorf("read body from stdin: %w", err)
	}
	return b, nil
}

func receiveCommand() command {
	return command{"receive", "QUEUE", "lease messages (prints id, receipt, body)", func(a *app, fs *flag.FlagSet) binder {
		n := fs.Int("max", 1, "most messages, 1-1000")
		wait := fs.Duration("wait", 0, "long-poll up to this long (max 20s; added to --timeout)")
		vis := fs.Duration("visibility", 0, "lease length (default: the queue's visibility)")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "QUEUE"); err != nil {
				return nil, err
			}
			if *n < 1 || *n > 1000 {
				return nil, usagef("--max %d outside 1-1000", *n)
			}
			if *wait < 0 || *wait > client.MaxWait {
				return nil, usagef("--wait %v outside 0-%v", *wait, client.MaxWait)
			}
			if given(fs, "visibility") {
				if err := durationWithin("visibility", *vis, client.MaxVisibility, false, "the queue's visibility"); err != nil {
					return nil, err
				}
			}
			a.g.wait = *wait
			return func(ctx context.Context, c *client.Client, o *output) error {
				ms, err := c.Receive(ctx, pos[0], client.ReceiveOptions{Max: *n, Wait: *wait, Visibility: *vis, Consumer: "raftq-cli"})
				if err != nil {
					return err
				}
				return o.received(ms)
			}, nil
		}
	}, false}
}

func nackCommand() command {
	return command{"nack", "RECEIPT", "give a leased message back", func(a *app, fs *flag.FlagSet) binder {
		delay := fs.Duration("delay", 0, "ready again after this long, 0s for at once (default: the queue's backoff)")
		text := fs.String("error", "", "error text recorded with the message")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "RECEIPT"); err != nil {
				return nil, err
			}
			opts := client.NackOptions{Error: *text}
			if given(fs, "delay") {
				if err := durationWithin("delay", *delay, client.MaxDelay, true, ""); err != nil {
					return nil, err
				}
				opts.Delay, opts.ReadyNow = *delay, *delay == 0
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				if err := c.Nack(ctx, pos[0], opts); err != nil {
					return err
				}
				return o.done("nacked", map[string]any{"nacked": pos[0]})
			}, nil
		}
	}, false}
}
