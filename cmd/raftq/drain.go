package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/raftq/raftq/client"
)

// drainPoll is how often remove-node and replace-node --wait ask again.
const drainPoll = time.Second

func removeNodeCommand() command {
	return command{"cluster remove-node", "ID", "move ID's replicas to other nodes, then remove and retire it (docs/operations.md)", func(a *app, fs *flag.FlagSet) binder {
		wait := fs.Duration("wait", 0, "wait up to this long for the node to be drained and retired")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "ID"); err != nil {
				return nil, err
			}
			return drainAction(a, *wait, func(ctx context.Context, c *client.Client) (client.NodeDrain, error) {
				return c.RemoveNode(ctx, pos[0])
			})
		}
	}, false}
}

func replaceNodeCommand() command {
	return command{"cluster replace-node", "OLD NEW", "move every replica of OLD to NEW (a member already), then remove and retire OLD", func(a *app, fs *flag.FlagSet) binder {
		wait := fs.Duration("wait", 0, "wait up to this long for OLD to be drained and retired")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "OLD", "NEW"); err != nil {
				return nil, err
			}
			return drainAction(a, *wait, func(ctx context.Context, c *client.Client) (client.NodeDrain, error) {
				return c.ReplaceNode(ctx, pos[0], pos[1])
			})
		}
	}, false}
}

// drainAction records the drain and, with --wait, watches it until the
// node is retired or the wait passes: exit 0 once retired, 1 with the
// progress if the wait ran out. The watch reads the node list, so the
// drain call (an administrative one, audited) is made once, and once more
// for the progress when the wait runs out.
func drainAction(a *app, wait time.Duration, call func(context.Context, *client.Client) (client.NodeDrain, error)) (action, error) {
	if wait < 0 {
		return nil, usagef("--wait %v is negative", wait)
	}
	a.g.wait = wait
	return func(ctx context.Context, c *client.Client, o *output) error {
		until := time.Now().Add(wait)
		d, err := call(ctx, c)
		if err != nil {
			return err
		}
		for !d.Done && wait > 0 {
			if time.Now().After(until) {
				if d, err = call(ctx, c); err != nil {
					return err
				}
				if d.Done {
					break
				}
				if err := o.drain(d); err != nil {
					return err
				}
				return fmt.Errorf("node %s not drained within %v", d.NodeID, wait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(drainPoll):
			}
			nodes, err := c.Nodes(ctx)
			if err != nil {
				return err
			}
			if retired(nodes, d.NodeID) {
				d = client.NodeDrain{NodeID: d.NodeID, To: d.To, Done: true}
			}
		}
		return o.drain(d)
	}, nil
}

// retired reports whether the node list shows id retired.
func retired(nodes []client.NodeInfo, id string) bool {
	for _, n := range nodes {
		if n.NodeID == id {
			return n.Retired
		}
	}
	return false
}

func (o *output) drain(d client.NodeDrain) error {
	if o.json {
		return o.emit(d)
	}
	if d.Done {
		fmt.Fprintf(o.w, "node %s drained, removed and retired\n", d.NodeID)
		return nil
	}
	to := "the least loaded nodes"
	if d.To != "" {
		to = d.To
	}
	fmt.Fprintf(o.w, "node %s draining to %s; shards left: %s; moving: %s\n", d.NodeID, to, dash(shardList(d.Replicas)), dash(d.Moving))
	return nil
}
