package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/tlsconf"
)

var roles = []string{"admin", "producer", "consumer", "viewer"}

// parseGrants checks ROLE:QUEUES grants as the server will, so a typo is
// a usage error here rather than a refusal later.
func parseGrants(in []string) ([]tlsconf.Grant, error) {
	out := make([]tlsconf.Grant, 0, len(in))
	for _, s := range in {
		g, err := tlsconf.ParseGrant(s)
		if err != nil {
			return nil, usagef("--grant: %v", err)
		}
		known := false
		for _, r := range roles {
			known = known || g.Role == r
		}
		if !known {
			return nil, usagef("--grant %s: role %q: want one of %s", s, g.Role, strings.Join(roles, ", "))
		}
		if strings.Contains(strings.TrimSuffix(g.Queues, "*"), "*") {
			return nil, usagef("--grant %s: queues %q: want a queue name, a prefix ending in *, or *", s, g.Queues)
		}
		out = append(out, g)
	}
	return out, nil
}

func grantStrings(gs []client.Grant) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = g.String()
	}
	return strings.Join(parts, ",")
}

func keysCommands() []command {
	return []command{
		{"keys create", "NAME", "make an API key with --grant roles; its token is printed once (pass it as --token or RAFTQ_TOKEN)", func(a *app, fs *flag.FlagSet) binder {
			var grants listFlag
			fs.Var(&grants, "grant", "ROLE:QUEUES (admin, producer, consumer, viewer; QUEUES a name, a prefix ending in *, or *), repeatable; at least one")
			tenant := fs.String("tenant", "", "the key acts in this tenant: its grants name the tenant's queues without TENANT/, and it reaches no other")
			return func(pos []string) (action, error) {
				if err := exactly(pos, "NAME"); err != nil {
					return nil, err
				}
				if len(grants) == 0 {
					return nil, usagef("--grant is required, such as --grant producer:orders.*")
				}
				gs, err := parseGrants(grants)
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					cg := make([]client.Grant, len(gs))
					for i, g := range gs {
						cg[i] = client.Grant{Role: g.Role, Queues: g.Queues}
					}
					k, token, err := c.CreateTenantKey(ctx, *tenant, pos[0], cg...)
					if err != nil {
						return err
					}
					return o.token("created", k, token)
				}, nil
			}
		}, false},
		{"keys list", "", "list API keys (never their secrets)", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					ks, err := c.ListKeys(ctx)
					if err != nil {
						return err
					}
					if o.json {
						return o.emit(ks)
					}
					rows := make([][]string, len(ks))
					for i, k := range ks {
						rows[i] = []string{k.ID, k.Name, orNone(k.Tenant), grantStrings(k.Grants), ts(k.Created), ts(k.Rotated), k.CreatedBy}
					}
					return o.table("ID\tNAME\tTENANT\tGRANTS\tCREATED\tROTATED\tCREATED BY", rows)
				}, nil
			}
		}, false},
		{"keys rotate", "KEY", "give API key KEY (an id or a name) a new secret and print its new token; the old one stops working", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "KEY"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					k, token, err := c.RotateKey(ctx, pos[0])
					if err != nil {
						return err
					}
					return o.token("rotated", k, token)
				}, nil
			}
		}, false},
		{"keys revoke", "KEY", "delete API key KEY (an id or a name); its token stops working on every node", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos, "KEY"); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					if err := c.RevokeKey(ctx, pos[0]); err != nil {
						return err
					}
					return o.done("revoked "+pos[0], map[string]any{"revoked": pos[0]})
				}, nil
			}
		}, false},
		{"whoami", "", "show who the cluster takes these credentials for, and their grants", func(a *app, fs *flag.FlagSet) binder {
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					p, err := c.WhoAmI(ctx)
					if err != nil {
						return err
					}
					if o.json {
						return o.emit(p)
					}
					g := grantStrings(p.Grants)
					if p.Unrestricted {
						g = "unrestricted"
					}
					if p.Tenant != "" {
						g += fmt.Sprintf(" in tenant %q", p.Tenant)
					}
					_, err = fmt.Fprintf(o.w, "%s\t%s\n", p.Name, g)
					return err
				}, nil
			}
		}, false},
		{"audit", "", "list the audit trail of administrative calls, oldest first (the cluster keeps the newest 4096)", func(a *app, fs *flag.FlagSet) binder {
			after := fs.Uint64("after", 0, "list records after this sequence number (page on with the last one shown)")
			limit := fs.Int("limit", 100, "most records to list, 1-1000")
			return func(pos []string) (action, error) {
				if err := exactly(pos); err != nil {
					return nil, err
				}
				if *limit < 1 || *limit > 1000 {
					return nil, usagef("--limit %d: want 1-1000", *limit)
				}
				return func(ctx context.Context, c *client.Client, o *output) error {
					rs, err := c.ListAudit(ctx, *after, *limit)
					if err != nil {
						return err
					}
					if o.json {
						return o.emit(rs)
					}
					rows := make([][]string, len(rs))
					for i, r := range rs {
						outcome := r.Code
						if r.Error != "" {
							outcome += ": " + r.Error
						}
						rows[i] = []string{strconv.FormatUint(r.Seq, 10), ts(r.At), r.Node, r.Caller, r.Method, r.Request, outcome}
					}
					return o.table("SEQ\tAT\tNODE\tCALLER\tMETHOD\tREQUEST\tOUTCOME", rows)
				}, nil
			}
		}, false},
	}
}

// token prints a key with its token, which the cluster cannot show again.
func (o *output) token(verb string, k client.KeyInfo, token string) error {
	if o.json {
		return o.emit(map[string]any{"key": k, "token": token})
	}
	in := ""
	if k.Tenant != "" {
		in = fmt.Sprintf(" in tenant %q", k.Tenant)
	}
	_, err := fmt.Fprintf(o.w, "%s API key %s (id %s, grants %s%s, at %s)\ntoken (shown once; keep it secret): %s\n",
		verb, k.Name, k.ID, grantStrings(k.Grants), in, ts(time.Now()), token)
	return err
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
