package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
	"google.golang.org/grpc/codes"
)

// Topics and subscriptions (docs/topics.md). A topic and each subscription
// are queues with fan-out fields, so these commands are thin: they check
// that the named queue is of the kind the command is about (a "topic
// delete" of a plain queue would delete the queue) and print the topic's
// view. Consumers use receive and work on a subscription's name.

func topicCommands() []command {
	return []command{
		topicCreateCommand(),
		{"topic list", "", "list topics with their subscriptions", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					ts, err := c.ListTopics(ctx)
					if err != nil {
						return err
					}
					return o.topics(ts)
				}, nil
			}
		}, false},
		{"topic get", "NAME", "show a topic's policy and its subscriptions with their backlogs", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					t, err := getTopic(ctx, c, pos[0])
					if err != nil {
						return err
					}
					st := &topicStats{subs: make([]client.QueueStats, len(t.Subscriptions))}
					own, err := c.Stats(ctx, t.Name)
					if err != nil {
						return fmt.Errorf("stats of topic %q: %w", t.Name, err)
					}
					st.retained = own.Retained
					for i, s := range t.Subscriptions {
						if st.subs[i], err = c.Stats(ctx, s.Name); err != nil {
							return fmt.Errorf("stats of subscription %q: %w", s.Name, err)
						}
					}
					return o.topic(t, st)
				}, nil
			}
		}, false},
		{"topic delete", "NAME", "delete a topic (refused while it has subscriptions)", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				name := pos[0]
				return func(ctx context.Context, c *client.Client, o *output) error {
					if _, err := isTopic(ctx, c, name); err != nil {
						return err
					}
					err := c.DeleteTopic(ctx, name)
					var e *client.Error
					if errors.As(err, &e) && e.Code == codes.FailedPrecondition {
						return &reportedError{err: err, msg: fmt.Sprintf("%s (raftq topic unsubscribe NAME deletes one)", e.Msg)}
					}
					if err != nil {
						return err
					}
					return o.done(fmt.Sprintf("deleted topic %q", name), map[string]any{"deleted": name})
				}, nil
			}
		}, false},
		topicSubscribeCommand(),
		{"topic unsubscribe", "NAME", "delete a subscription and the messages it holds", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				name := pos[0]
				return func(ctx context.Context, c *client.Client, o *output) error {
					q, err := c.GetQueue(ctx, name)
					if err != nil {
						return err
					}
					if q.Options.SubscriptionOf == "" {
						return fmt.Errorf("%q is not a subscription (raftq queue delete deletes a queue, raftq topic delete a topic)", name)
					}
					if err := c.DeleteQueue(ctx, name); err != nil {
						return err
					}
					return o.done(fmt.Sprintf("deleted subscription %q of topic %q", name, q.Options.SubscriptionOf),
						map[string]any{"deleted": name, "topic": q.Options.SubscriptionOf})
				}, nil
			}
		}, false},
		topicPublishCommand(),
		topicUpdateCommand(),
		topicFilterCommand(),
	}
}

func topicUpdateCommand() command {
	return command{"topic update", "NAME", "change a topic's retention or dedup window (its mode is fixed)", func(a *app, fs *flag.FlagSet) binder {
		var retention, window time.Duration
		fs.DurationVar(&retention, "retention", 0, "keep each published message this long for subscriptions created later with --from (0: none; a shorter one drops older publications at once)")
		fs.DurationVar(&window, "dedup-window", 0, "how long a publish's dedup key suppresses a repeat")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "NAME"); err != nil {
				return nil, err
			}
			if !given(fs, "retention") && !given(fs, "dedup-window") {
				return nil, usagef("nothing to change: give --retention or --dedup-window")
			}
			if given(fs, "retention") {
				if err := durationWithin("retention", retention, client.MaxRetention, true, ""); err != nil {
					return nil, err
				}
			}
			if given(fs, "dedup-window") {
				if err := durationWithin("dedup-window", window, client.MaxRetention, false, "the default 5m"); err != nil {
					return nil, err
				}
			}
			name := pos[0]
			return func(ctx context.Context, c *client.Client, out *output) error {
				q, err := isTopic(ctx, c, name)
				if err != nil {
					return err
				}
				opts := q.Options
				if given(fs, "retention") {
					opts.TopicRetention = retention
				}
				if given(fs, "dedup-window") {
					opts.DedupWindow = window
				}
				if q, err = c.UpdateQueue(ctx, q.Name, opts); err != nil {
					return err
				}
				return out.topic(client.TopicInfo{QueueInfo: q}, nil)
			}, nil
		}
	}, false}
}

func topicFilterCommand() command {
	return command{"topic filter", "SUBSCRIPTION EXPR", `set a subscription's filter for the publishes after it ("" for all; docs/topics.md)`, func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			// EXPR may be "": the subscription then takes every publish.
			if len(pos) != 2 || pos[0] == "" {
				return nil, usagef("want 2 argument(s) SUBSCRIPTION EXPR, got %d", len(pos))
			}
			name, expr := pos[0], pos[1]
			return func(ctx context.Context, c *client.Client, out *output) error {
				q, err := c.GetQueue(ctx, name)
				if err != nil {
					return err
				}
				if q.Options.SubscriptionOf == "" {
					return fmt.Errorf("%q is not a subscription (raftq topic subscribe makes one)", name)
				}
				opts := q.Options
				opts.Filter = expr
				if q, err = c.UpdateQueue(ctx, q.Name, opts); err != nil {
					return err
				}
				return out.queue(q)
			}, nil
		}
	}, false}
}

// isTopic gets queue name and refuses it unless it is a topic, saying
// what it is instead.
func isTopic(ctx context.Context, c *client.Client, name string) (client.QueueInfo, error) {
	q, err := c.GetQueue(ctx, name)
	if err != nil {
		return client.QueueInfo{}, err
	}
	if !q.Options.Topic {
		what := "a queue"
		if t := q.Options.SubscriptionOf; t != "" {
			what = fmt.Sprintf("a subscription of topic %q", t)
		}
		return client.QueueInfo{}, fmt.Errorf("%q is %s, not a topic (raftq topic create makes one)", name, what)
	}
	return q, nil
}

// getTopic is topic name with its subscriptions.
func getTopic(ctx context.Context, c *client.Client, name string) (client.TopicInfo, error) {
	q, err := isTopic(ctx, c, name)
	if err != nil {
		return client.TopicInfo{}, err
	}
	ts, err := c.ListTopics(ctx)
	if err != nil {
		return client.TopicInfo{}, err
	}
	for _, t := range ts {
		// By the name the server answered with: a tenant's key names
		// "orders" and gets "acme/orders".
		if t.Name == q.Name {
			return t, nil
		}
	}
	// Deleted between the two calls.
	return client.TopicInfo{}, fmt.Errorf("topic %q not found", name)
}

func topicCreateCommand() command {
	return command{"topic create", "NAME", "create a topic (idempotent for the same options): sends to it are published to its subscriptions", func(a *app, fs *flag.FlagSet) binder {
		var o client.TopicOptions
		var maxSize uint
		fs.BoolVar(&o.FIFO, "fifo", false, "FIFO topic: every subscription is FIFO, a group's messages in publish order; a group on every publish; fixed at create")
		fs.DurationVar(&o.Retention, "retention", 0, "keep each published message this long for subscriptions created later with --from (default 0: none kept)")
		fs.DurationVar(&o.DedupWindow, "dedup-window", 0, "how long a publish's dedup key suppresses a repeat (default 5m)")
		fs.UintVar(&maxSize, "max-message-bytes", 0, "largest published body in bytes (default and cap 262144)")
		fs.UintVar(&maxSize, "max-size", 0, "the same as --max-message-bytes, as queue create names it")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "NAME"); err != nil {
				return nil, err
			}
			if given(fs, "retention") {
				if err := durationWithin("retention", o.Retention, client.MaxRetention, true, ""); err != nil {
					return nil, err
				}
			}
			if given(fs, "dedup-window") {
				if err := durationWithin("dedup-window", o.DedupWindow, client.MaxRetention, false, "the default 5m"); err != nil {
					return nil, err
				}
			}
			flagName := "max-message-bytes"
			if given(fs, "max-size") {
				flagName = "max-size"
			}
			if given(fs, flagName) {
				switch {
				case maxSize == 0:
					return nil, usagef("--%s 0: give at least 1 (leave the flag out for the default 262144)", flagName)
				case maxSize > client.MaxBodyBytes:
					return nil, usagef("--%s %d is above the limit %d", flagName, maxSize, client.MaxBodyBytes)
				}
			}
			o.MaxMessageBytes = uint32(maxSize)
			name := pos[0]
			return func(ctx context.Context, c *client.Client, out *output) error {
				q, err := c.CreateTopic(ctx, name, o)
				if errors.Is(err, client.ErrExists) {
					return &reportedError{err: err, msg: fmt.Sprintf("%s; raftq topic get %s shows it", message(err), name)}
				}
				if err != nil {
					return err
				}
				return out.topic(client.TopicInfo{QueueInfo: q}, nil)
			}, nil
		}
	}, false}
}

// subscriptionSkip are the queue policy flags a subscription does not
// take: its mode is its topic's, and dedup and the size limit apply at
// the topic, to the publish.
var subscriptionSkip = map[string]bool{"fifo": true, "dedup-window": true, "max-size": true}

func topicSubscribeCommand() command {
	return command{"topic subscribe", "TOPIC NAME", "create subscription NAME of TOPIC, a queue of its own for consumers (idempotent for the same options)", func(a *app, fs *flag.FlagSet) binder {
		filter := fs.String("filter", "", `receive only the publications that match, e.g. 'type = order.placed and attr.region ^= eu-' (docs/topics.md; default: all)`)
		from := fs.String("from", "now", "now: only messages published after the subscription is created; earliest: also every message the topic retains; or an RFC 3339 time: those retained published since then")
		var p policyFlags
		p.registerExcept(fs, false, subscriptionSkip)
		return func(pos []string) (action, error) {
			if err := exactly(pos, "TOPIC", "NAME"); err != nil {
				return nil, err
			}
			if pos[0] == pos[1] {
				return nil, usagef("the subscription needs a name of its own, not its topic's %q (e.g. %s-billing)", pos[0], pos[0])
			}
			replay, err := parseFrom(*from)
			if err != nil {
				return nil, err
			}
			if err := p.check(fs, false); err != nil {
				return nil, err
			}
			topic, name := pos[0], pos[1]
			return func(ctx context.Context, c *client.Client, o *output) error {
				if _, err := isTopic(ctx, c, topic); err != nil {
					return err
				}
				var d client.QueueOptions
				p.apply(fs, &d)
				q, err := c.Subscribe(ctx, topic, name, client.SubscriptionOptions{Filter: *filter, From: replay, Delivery: d})
				if errors.Is(err, client.ErrExists) {
					return &reportedError{err: err, msg: fmt.Sprintf("%s; raftq queue get %s shows it", message(err), name)}
				}
				if err != nil {
					return err
				}
				return o.queue(q)
			}, nil
		}
	}, false}
}

// parseFrom reads subscribe's --from: the zero time for now (no replay),
// client.ReplayEarliest for everything retained, else the time given.
func parseFrom(s string) (time.Time, error) {
	switch s {
	case "now":
		return time.Time{}, nil
	case "earliest":
		return client.ReplayEarliest, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("--from %q: want earliest, now or an RFC 3339 time like 2025-01-02T15:04:05Z", s)
	}
	if t.UnixMilli() <= client.ReplayEarliest.UnixMilli() {
		// The wire's 0 and 1 mean "now" and "earliest": a time this old
		// can only mean everything retained.
		return client.ReplayEarliest, nil
	}
	return t, nil
}

func topicPublishCommand() command {
	return command{"topic publish", "TOPIC BODY", `publish a message to every matching subscription of TOPIC (BODY "-" reads stdin); prints its id and the number of deliveries`, func(a *app, fs *flag.FlagSet) binder {
		var sf sendFlags
		sf.register(fs)
		return func(pos []string) (action, error) {
			opts, body, err := sf.message(a, fs, pos, "TOPIC")
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				// A publish is a send: to a plain queue it would enqueue
				// one message, not fan out.
				if _, err := isTopic(ctx, c, pos[0]); err != nil {
					return err
				}
				r, err := c.Publish(ctx, pos[0], body, opts...)
				if err != nil {
					return err
				}
				return o.published(r)
			}, nil
		}
	}, false}
}

func (o *output) published(r client.SendResult) error {
	if o.json {
		return o.emit(map[string]any{"id": r.ID, "deduplicated": r.Deduplicated, "deliveries": r.Deliveries})
	}
	if r.Deduplicated {
		_, err := fmt.Fprintf(o.w, "%s (deduplicated: an earlier publish had this key; no new deliveries)\n", r.ID)
		return err
	}
	_, err := fmt.Fprintf(o.w, "%s delivered to %d subscription(s)\n", r.ID, r.Deliveries)
	return err
}

// replayName renders a subscription's replay start.
func replayName(t time.Time) string {
	switch {
	case t.IsZero():
		return "now"
	case t.Equal(client.ReplayEarliest):
		return "earliest"
	}
	return ts(t)
}

// topicRetention renders a topic's retention, where 0 keeps nothing.
func topicRetention(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

// topicStats are topic get's counts: the publications the topic retains
// and each subscription's stats, in t.Subscriptions' order.
type topicStats struct {
	retained uint64
	subs     []client.QueueStats
}

func topicJSON(t client.TopicInfo, stats *topicStats) map[string]any {
	p := t.Options
	subs := make([]map[string]any, len(t.Subscriptions))
	for i, s := range t.Subscriptions {
		subs[i] = queueJSON(s)
		if stats != nil {
			st := stats.subs[i]
			subs[i]["stats"] = map[string]any{"ready": st.Ready, "delayed": st.Delayed, "in_flight": st.InFlight, "dead": st.Dead}
		}
	}
	out := map[string]any{
		"name": t.Name, "fifo": p.FIFO, "created": ts(t.Created), "retention_ms": p.TopicRetention.Milliseconds(),
		"dedup_window_ms": p.DedupWindow.Milliseconds(), "max_message_bytes": p.MaxMessageBytes,
		"subscriptions": subs,
	}
	if stats != nil {
		out["retained"] = stats.retained
	}
	return out
}

// topic prints a topic and, when stats are given, what it retains and
// each subscription's backlog.
func (o *output) topic(t client.TopicInfo, stats *topicStats) error {
	if o.json {
		return o.emit(topicJSON(t, stats))
	}
	p := t.Options
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	rows := [][]string{
		{"name", t.Name}, {"mode", mode(p.FIFO)}, {"created", ts(t.Created)},
		{"retention", topicRetention(p.TopicRetention)}, {"dedup-window", p.DedupWindow.String()},
		{"max-size", strconv.Itoa(int(p.MaxMessageBytes))}, {"subscriptions", strconv.Itoa(len(t.Subscriptions))},
	}
	if stats != nil {
		rows = append(rows, []string{"retained", u(stats.retained)})
	}
	if err := o.table("FIELD\tVALUE", rows); err != nil || len(t.Subscriptions) == 0 {
		return err
	}
	fmt.Fprintln(o.w)
	rows = make([][]string, len(t.Subscriptions))
	for i, s := range t.Subscriptions {
		q := s.Options
		rows[i] = []string{s.Name, dash(q.Filter), replayName(q.ReplayFrom), q.Visibility.String(),
			strconv.Itoa(int(q.MaxReceives)), strconv.FormatBool(!q.DisableDLQ)}
		if stats != nil {
			st := stats.subs[i]
			rows[i] = append(rows[i], u(st.Ready+st.Delayed), u(st.InFlight), u(st.Dead))
		}
	}
	header := "SUBSCRIPTION\tFILTER\tFROM\tVISIBILITY\tMAX-RECEIVES\tDLQ"
	if stats != nil {
		header += "\tBACKLOG\tIN-FLIGHT\tDEAD"
	}
	return o.table(header, rows)
}

func (o *output) topics(list []client.TopicInfo) error {
	if o.json {
		out := make([]map[string]any, len(list))
		for i, t := range list {
			out[i] = topicJSON(t, nil)
		}
		return o.emit(out)
	}
	rows := make([][]string, len(list))
	for i, t := range list {
		names := make([]string, len(t.Subscriptions))
		for k, s := range t.Subscriptions {
			names[k] = s.Name
		}
		rows[i] = []string{t.Name, mode(t.Options.FIFO), topicRetention(t.Options.TopicRetention), dash(strings.Join(names, ",")), ts(t.Created)}
	}
	return o.table("TOPIC\tMODE\tRETENTION\tSUBSCRIPTIONS\tCREATED", rows)
}
