package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/tlsconf"
)

// Default validity: a CA outlives the certificates it signs; those are
// renewed (raftq certs node again, then SIGHUP) well before a year.
const (
	caValidFor   = 10 * 365 * 24 * time.Hour
	certValidFor = 365 * 24 * time.Hour
)

func certsCommands() []command {
	return []command{
		{"certs init", "", "make a CA (ca.crt, ca.key) and a gossip key (gossip.key) in --dir; keep ca.key off the nodes", func(a *app, fs *flag.FlagSet) binder {
			dir := fs.String("dir", "certs", "directory to write into")
			valid := fs.Duration("valid-for", caValidFor, "validity of the CA")
			return offline(func(pos []string) error {
				if err := exactly(pos); err != nil {
					return err
				}
				if _, err := tlsconf.OpenDir(*dir); err == nil {
					return usagef("%s already holds a CA: a new one would orphan every certificate it signed", *dir)
				}
				return certsInit(a, *dir, *valid)
			})
		}, true},
		{"certs node", "ID", "issue node ID's certificate (ID.crt, ID.key) from the CA in --dir; --host names every address clients dial it at", func(a *app, fs *flag.FlagSet) binder {
			dir := fs.String("dir", "certs", "directory holding the CA; the certificate is written there")
			hosts := fs.String("host", "", "comma-separated DNS names and IPs clients reach the node at (localhost and 127.0.0.1 are always added)")
			valid := fs.Duration("valid-for", certValidFor, "validity of the certificate")
			return offline(func(pos []string) error {
				if err := exactly(pos, "ID"); err != nil {
					return err
				}
				hs := append([]string{"localhost", "127.0.0.1", "::1"}, splitList(*hosts)...)
				return certsIssue(a, *dir, tlsconf.Identity{Role: tlsconf.RoleNode, Name: pos[0]}, hs, *valid)
			})
		}, true},
		{"certs client", "NAME", "issue a client certificate for NAME (client-NAME.crt, client-NAME.key) from the CA in --dir, carrying its --grant roles", func(a *app, fs *flag.FlagSet) binder {
			dir := fs.String("dir", "certs", "directory holding the CA; the certificate is written there")
			valid := fs.Duration("valid-for", certValidFor, "validity of the certificate")
			var grants listFlag
			fs.Var(&grants, "grant", "ROLE:QUEUES the holder may act as (admin, producer, consumer, viewer; QUEUES a name, a prefix ending in *, or *), repeatable; a certificate without grants may only call WhoAmI, except one named admin, which is admin:*")
			return offline(func(pos []string) error {
				if err := exactly(pos, "NAME"); err != nil {
					return err
				}
				gs, err := parseGrants(grants)
				if err != nil {
					return err
				}
				return certsIssue(a, *dir, tlsconf.Identity{Role: tlsconf.RoleClient, Name: pos[0]}, nil, *valid, gs...)
			})
		}, true},
		{"certs dev", "", "make what a development cluster needs in --dir, keeping what exists: a CA, a gossip key, a certificate for each of --nodes and a client certificate (client-admin)", func(a *app, fs *flag.FlagSet) binder {
			dir := fs.String("dir", devCertsDir, "directory to write into")
			nodes := fs.String("nodes", "n1,n2,n3", "comma-separated node ids (each id is also a host name in its certificate, as in compose)")
			hosts := fs.String("host", "", "comma-separated DNS names and IPs added to every node's certificate (compose: the nodes' fixed IPs)")
			return offline(func(pos []string) error {
				if err := exactly(pos); err != nil {
					return err
				}
				ids := splitList(*nodes)
				if len(ids) == 0 {
					return usagef("--nodes is empty")
				}
				return certsDev(a, *dir, ids, splitList(*hosts))
			})
		}, true},
	}
}

// devCertsDir is where make run keeps its development certificates.
const devCertsDir = "data/certs"

// offline adapts a check-and-run function to a binder of an offline
// command: the work happens when the action runs.
func offline(f func(pos []string) error) binder {
	return func(pos []string) (action, error) {
		return func(context.Context, *client.Client, *output) error { return f(pos) }, nil
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func certsInit(a *app, dir string, valid time.Duration) error {
	if _, err := tlsconf.InitDir(dir, valid); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "wrote ca.crt, ca.key and gossip.key in %s\n", dir)
	return nil
}

func openCertsDir(dir string) (*tlsconf.Dir, error) {
	d, err := tlsconf.OpenDir(dir)
	if errors.Is(err, tlsconf.ErrNoCA) {
		return nil, usagef("no CA in %s: run raftq certs init --dir %s first", dir, dir)
	}
	return d, err
}

func certsIssue(a *app, dir string, id tlsconf.Identity, hosts []string, valid time.Duration, grants ...tlsconf.Grant) error {
	if err := id.Validate(); err != nil {
		return usagef("%v", err)
	}
	if id.Role == tlsconf.RoleNode {
		if err := tlsconf.CheckNodeName(id.Name); err != nil {
			return usagef("%v", err)
		}
	}
	d, err := openCertsDir(dir)
	if err != nil {
		return err
	}
	var f tlsconf.Files
	if id.Role == tlsconf.RoleNode {
		f, err = d.IssueNode(id.Name, hosts, valid)
	} else {
		f, err = d.IssueClient(id.Name, valid, grants...)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "wrote %s and %s for %s\n", f.Cert, f.Key, id)
	return nil
}

func certsDev(a *app, dir string, nodes, hosts []string) error {
	if _, err := tlsconf.OpenDir(dir); errors.Is(err, tlsconf.ErrNoCA) {
		if err := certsInit(a, dir, caValidFor); err != nil {
			return err
		}
	}
	d, err := openCertsDir(dir)
	if err != nil {
		return err
	}
	for _, id := range nodes {
		if err := (tlsconf.Identity{Role: tlsconf.RoleNode, Name: id}).Validate(); err != nil {
			return usagef("--nodes: %v", err)
		}
		f, issued, err := d.EnsureNode(id, append([]string{"localhost", "127.0.0.1", "::1", id}, hosts...), certValidFor)
		if err != nil {
			return err
		}
		if issued {
			fmt.Fprintf(a.stdout, "wrote %s and %s for node/%s\n", f.Cert, f.Key, id)
		}
	}
	// The operator's own certificate: the development cluster runs
	// --client-auth require, and the CLI and bench present this one.
	f, issued, err := d.EnsureClient(devClient, certValidFor)
	if err != nil {
		return err
	}
	if issued {
		fmt.Fprintf(a.stdout, "wrote %s and %s for client/%s\n", f.Cert, f.Key, devClient)
	}
	return nil
}

// devClient is the client certificate raftq certs dev makes.
const devClient = "admin"
