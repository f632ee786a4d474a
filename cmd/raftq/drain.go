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

// drainAction records the drain and, with --wait, asks again (the call is
// idempotent) until the node is retired or the wait passes: exit 0 once
// retired, 1 with the progress if the wait ran out.
func drainAction(a *app, wait time.Duration, call func(context.Context, *client.Client) (client.NodeDrain, error)) (action, error) {
	if wait < 0 {
		return nil, usagef("--wait %v is negative", wait)
	}
	a.g.wait = wait
	return func(ctx context.Context, c *client.Client, o *output) error {
		until := time.Now().Add(wait)
		for {
			d, err := call(ctx, c)
			if err != nil {
				return err
			}
			if d.Done || wait == 0 {
				return o.drain(d)
			}
			if time.Now().After(until) {
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
		}
	}, nil
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
