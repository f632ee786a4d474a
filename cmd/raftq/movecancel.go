package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/raftq/raftq/client"
)

func moveCancelCommand() command {
	return command{"cluster move cancel", "SHARD", "abort the replica move running on SHARD while its new replica is not yet promoted (docs/operations.md)", func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos, "SHARD"); err != nil {
				return nil, err
			}
			shard, err := strconv.ParseUint(pos[0], 10, 32)
			if err != nil || shard > math.MaxUint32 {
				return nil, usagef("SHARD %q is not a shard number (0, 1, ...)", pos[0])
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				mc, err := c.CancelMove(ctx, uint32(shard))
				if err != nil {
					return err
				}
				return o.moveCancel(mc)
			}, nil
		}
	}, false}
}

func (o *output) moveCancel(mc client.MoveCancel) error {
	if o.json {
		return o.emit(mc)
	}
	if mc.Aborted {
		fmt.Fprintf(o.w, "move of shard %d from %s to %s aborted\n", mc.Shard, dash(mc.From), mc.To)
		return nil
	}
	fmt.Fprintf(o.w, "move of shard %d from %s to %s aborting: %s leaves the group within seconds\n", mc.Shard, dash(mc.From), mc.To, mc.To)
	return nil
}
