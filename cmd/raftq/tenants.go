package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/raftq/raftq/client"
)

// quotaFlags are the quota flags of tenant create/update (tenant true)
// and queue create/update (docs/tenancy.md).
type quotaFlags struct {
	tenant                             bool
	sendRate, sendBurst, maxQueues     uint
	maxMessages, maxBytes, maxInFlight uint64
	maxSize, weight                    uint
}

func (q *quotaFlags) register(fs *flag.FlagSet, tenant, update bool) {
	q.tenant = tenant
	scope := "the queue over every shard"
	if tenant {
		scope = "all the tenant's queues together"
	}
	keep := " (0: no limit)"
	if update {
		keep = " (0: no limit; unchanged if not given)"
	}
	fs.UintVar(&q.sendRate, "send-rate", 0, "quota: messages per second sent to "+scope+keep)
	fs.UintVar(&q.sendBurst, "send-burst", 0, "quota: sends allowed at once above --send-rate (default: one second's worth)")
	fs.Uint64Var(&q.maxMessages, "max-messages", 0, "quota: live (ready, delayed, leased) messages in "+scope+keep)
	fs.Uint64Var(&q.maxBytes, "max-bytes", 0, "quota: live message body bytes in "+scope+keep)
	fs.Uint64Var(&q.maxInFlight, "max-in-flight", 0, "quota: leased messages of "+scope+keep)
	if tenant {
		fs.UintVar(&q.maxQueues, "max-queues", 0, "quota: queues the tenant may hold"+keep)
		fs.UintVar(&q.maxSize, "max-size", 0, "quota: largest message body in bytes for every queue of the tenant"+keep)
		fs.UintVar(&q.weight, "weight", 0, "the tenant's share of each shard's sends against other tenants' while both wait, 1-1000 (default 1)")
	}
}

// check refuses values the server would, in flag names.
func (q *quotaFlags) check() error {
	if q.sendRate > 10_000_000 || q.sendBurst > 10_000_000 {
		return usagef("--send-rate and --send-burst are at most 10000000")
	}
	if q.sendBurst > 0 && q.sendRate == 0 {
		return usagef("--send-burst needs --send-rate")
	}
	if q.weight > 1000 {
		return usagef("--weight %d is above 1000", q.weight)
	}
	if q.maxSize > client.MaxBodyBytes {
		return usagef("--max-size %d is above the limit %d", q.maxSize, client.MaxBodyBytes)
	}
	return nil
}

// apply copies the quota flags given onto qs.
func (q *quotaFlags) apply(fs *flag.FlagSet, qs *client.Quotas) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "send-rate":
			qs.SendRate = uint32(q.sendRate)
		case "send-burst":
			qs.SendBurst = uint32(q.sendBurst)
		case "max-messages":
			qs.MaxMessages = q.maxMessages
		case "max-bytes":
			qs.MaxBytes = q.maxBytes
		case "max-in-flight":
			qs.MaxInFlight = q.maxInFlight
		case "max-queues":
			qs.MaxQueues = uint32(q.maxQueues)
		case "max-size":
			if q.tenant {
				qs.MaxMessageBytes = uint32(q.maxSize)
			}
		case "weight":
			qs.Weight = uint32(q.weight)
		}
	})
}

// quotaRows renders quotas as FIELD/VALUE rows.
func quotaRows(prefix string, q client.Quotas, tenant bool) [][]string {
	rate := "none"
	if q.SendRate > 0 {
		burst := q.SendBurst
		if burst == 0 {
			burst = q.SendRate
		}
		rate = fmt.Sprintf("%d/s (burst %d)", q.SendRate, burst)
	}
	rows := [][]string{
		{prefix + "send-rate", rate},
		{prefix + "max-messages", limit(q.MaxMessages)},
		{prefix + "max-bytes", limit(q.MaxBytes)},
		{prefix + "max-in-flight", limit(q.MaxInFlight)},
	}
	if tenant {
		rows = append(rows, []string{prefix + "max-queues", limit(uint64(q.MaxQueues))}, []string{prefix + "max-size", limit(uint64(q.MaxMessageBytes))},
			[]string{prefix + "weight", strconv.Itoa(int(max(q.Weight, 1)))})
	}
	return rows
}

func quotasJSON(q client.Quotas) map[string]any {
	return map[string]any{"send_rate": q.SendRate, "send_burst": q.SendBurst, "max_messages": q.MaxMessages, "max_bytes": q.MaxBytes,
		"max_in_flight": q.MaxInFlight, "max_queues": q.MaxQueues, "max_message_bytes": q.MaxMessageBytes, "weight": max(q.Weight, 1)}
}

func (o *output) tenant(t client.Tenant, usage bool) error {
	if o.json {
		v := map[string]any{"name": t.Name, "quotas": quotasJSON(t.Quotas), "created": ts(t.Created), "updated": ts(t.Updated)}
		if usage {
			v["queues"], v["messages"], v["live_bytes"], v["in_flight"] = t.Queues, t.Messages, t.LiveBytes, t.InFlight
		}
		return o.emit(v)
	}
	rows := [][]string{{"name", t.Name}, {"created", ts(t.Created)}, {"updated", ts(t.Updated)}}
	rows = append(rows, quotaRows("", t.Quotas, true)...)
	if usage {
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		rows = append(rows, []string{"queues", u(uint64(t.Queues))}, []string{"messages", u(t.Messages)},
			[]string{"live-bytes", u(t.LiveBytes)}, []string{"in-flight", u(t.InFlight)})
	}
	return o.table("FIELD\tVALUE", rows)
}

func tenantCommands() []command {
	createOrUpdate := func(verb string) command {
		update := verb == "update"
		summary := "create a tenant with quotas (its queues are named NAME/QUEUE; idempotent for the same quotas)"
		if update {
			summary = "change the given quotas of a tenant"
		}
		return command{"tenant " + verb, "NAME", summary, func(a *app, fs *flag.FlagSet) binder {
			var q quotaFlags
			q.register(fs, true, update)
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				if err := q.check(); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					var qs client.Quotas
					if update {
						cur, err := c.GetTenant(ctx, pos[0])
						if err != nil {
							return err
						}
						qs = cur.Quotas
					}
					q.apply(fs, &qs)
					var (
						t   client.Tenant
						err error
					)
					if update {
						t, err = c.UpdateTenant(ctx, pos[0], qs)
					} else {
						t, err = c.CreateTenant(ctx, pos[0], qs)
					}
					if err != nil {
						return err
					}
					return o.tenant(t, false)
				}, nil
			}
		}, false}
	}
	return []command{
		createOrUpdate("create"),
		createOrUpdate("update"),
		{"tenant get", "[NAME]", "show a tenant's quotas and what its queues hold (a tenant's own key may leave NAME out)", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if len(pos) > 1 {
					return nil, usagef("want at most one NAME")
				}
				name := ""
				if len(pos) == 1 {
					name = pos[0]
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					t, err := c.GetTenant(ctx, name)
					if err != nil {
						return err
					}
					return o.tenant(t, true)
				}, nil
			}
		}, false},
		{"tenant list", "", "list tenants and their quotas", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					ts, err := c.ListTenants(ctx)
					if err != nil {
						return err
					}
					if o.json {
						out := make([]map[string]any, len(ts))
						for i, t := range ts {
							out[i] = map[string]any{"name": t.Name, "quotas": quotasJSON(t.Quotas)}
						}
						return o.emit(out)
					}
					rows := make([][]string, len(ts))
					for i, t := range ts {
						q := quotaRows("", t.Quotas, true)
						rows[i] = []string{t.Name, q[0][1], q[1][1], q[2][1], q[3][1], q[4][1], q[5][1]}
					}
					return o.table("NAME\tSEND-RATE\tMAX-MESSAGES\tMAX-BYTES\tMAX-IN-FLIGHT\tMAX-QUEUES\tMAX-SIZE", rows)
				}, nil
			}
		}, false},
		{"tenant delete", "NAME", "delete a tenant that has no queues and no API keys left", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					if err := c.DeleteTenant(ctx, pos[0]); err != nil {
						return err
					}
					return o.done(fmt.Sprintf("deleted tenant %q", pos[0]), map[string]any{"deleted": pos[0]})
				}, nil
			}
		}, false},
	}
}
