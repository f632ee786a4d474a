package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/raftq/raftq/client"
)

func shardsCommand() command {
	return command{"cluster shards", "", "show the shard count, the hash slots each shard owns and the running slot moves", func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				g, err := c.SetShardCount(ctx, 0, false)
				if err != nil {
					return err
				}
				return o.shardGrowth(g, false)
			}, nil
		}
	}, false}
}

func shardsSetCommand() command {
	return command{"cluster shards set", "N", "grow the data shards to N online (the count only grows); --dry-run prints the new shards and slot moves only (docs/operations.md)", func(a *app, fs *flag.FlagSet) binder {
		dry := fs.Bool("dry-run", false, "print the plan without changing anything")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "N"); err != nil {
				return nil, err
			}
			n, err := strconv.ParseUint(pos[0], 10, 32)
			if err != nil || n == 0 || n > math.MaxUint32 {
				return nil, usagef("N %q is not a shard count (1, 2, ...)", pos[0])
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				g, err := c.SetShardCount(ctx, uint32(n), *dry)
				if err != nil {
					return err
				}
				return o.shardGrowth(g, *dry)
			}, nil
		}
	}, false}
}

func (o *output) shardGrowth(g client.ShardGrowth, dry bool) error {
	if o.json {
		return o.emit(g)
	}
	switch {
	case dry && len(g.NewShards) > 0:
		fmt.Fprintf(o.w, "plan: %d -> %d shards (%d hash slots)\n", g.Previous, g.Previous+uint32(len(g.NewShards)), g.Slots)
	case g.Count != g.Previous:
		fmt.Fprintf(o.w, "grown: %d -> %d shards (%d hash slots); the slot moves run on their own\n", g.Previous, g.Count, g.Slots)
	default:
		fmt.Fprintf(o.w, "%d shards, %d hash slots\n", g.Count, g.Slots)
	}
	for id := g.Previous; id < g.Previous+uint32(len(g.NewShards)); id++ {
		fmt.Fprintf(o.w, "new shard %d on %v\n", id, g.NewShards[id])
	}
	for id, n := range g.SlotsPerShard {
		fmt.Fprintf(o.w, "shard %d owns %d slots\n", id, n)
	}
	if len(g.Moves) == 0 {
		fmt.Fprintln(o.w, "no slot moves running or planned")
	}
	for _, mv := range g.Moves {
		if mv.ID == 0 {
			fmt.Fprintf(o.w, "planned: %d slots from shard %d to shard %d\n", mv.Slots, mv.From, mv.To)
			continue
		}
		held := ""
		if mv.HeldGroups > 0 {
			held = fmt.Sprintf(", %d FIFO groups held until shard %d has delivered their older messages", mv.HeldGroups, mv.From)
		}
		fmt.Fprintf(o.w, "move %d: %d slots from shard %d to shard %d (%s%s)\n", mv.ID, mv.Slots, mv.From, mv.To, mv.Phase, held)
	}
	return nil
}
