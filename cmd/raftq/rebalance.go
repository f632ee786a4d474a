package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/raftq/raftq/client"
)

func rebalanceCommand() command {
	return command{"cluster rebalance", "", "spread replicas and preferred leaders evenly over the live nodes now; --dry-run prints the plan only", func(a *app, fs *flag.FlagSet) binder {
		dry := fs.Bool("dry-run", false, "print the plan (replica moves, preferred-leader changes) without changing anything")
		return func(pos []string) (action, error) {
			if err := exactly(pos); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				p, err := c.Rebalance(ctx, *dry)
				if err != nil {
					return err
				}
				return o.rebalance(p, *dry)
			}, nil
		}
	}, false}
}

func (o *output) rebalance(p client.RebalancePlan, dry bool) error {
	if o.json {
		return o.emit(p)
	}
	if p.Moving != "" {
		fmt.Fprintf(o.w, "moving now: %s\n", p.Moving)
	}
	if len(p.Moves) == 0 && len(p.Leaders) == 0 {
		fmt.Fprintln(o.w, "balanced: nothing to do")
		return nil
	}
	if len(p.Moves) > 0 {
		fmt.Fprintf(o.w, "replica moves (%d, one at a time; FROM - adds a replica to a shard short of --replication):\n", len(p.Moves))
		rows := make([][]string, len(p.Moves))
		for i, m := range p.Moves {
			rows[i] = []string{strconv.FormatUint(uint64(m.Shard), 10), dash(m.From), m.To}
		}
		if err := o.table("SHARD\tFROM\tTO", rows); err != nil {
			return err
		}
	}
	if len(p.Leaders) > 0 {
		fmt.Fprintf(o.w, "preferred-leader changes (%d):\n", len(p.Leaders))
		rows := make([][]string, len(p.Leaders))
		for i, l := range p.Leaders {
			rows[i] = []string{strconv.FormatUint(uint64(l.Shard), 10), dash(l.From), l.To}
		}
		if err := o.table("SHARD\tFROM\tTO", rows); err != nil {
			return err
		}
	}
	rows := make([][]string, len(p.Nodes))
	for i, n := range p.Nodes {
		rows[i] = []string{n.NodeID, fmt.Sprintf("%d -> %d", n.Replicas, n.ReplicasAfter), fmt.Sprintf("%d -> %d", n.Leaders, n.LeadersAfter)}
	}
	if err := o.table("NODE\tREPLICAS\tPREFERRED-LEADER-OF", rows); err != nil {
		return err
	}
	switch {
	case dry:
		fmt.Fprintln(o.w, "dry run: nothing changed")
	case p.Started:
		fmt.Fprintln(o.w, "rebalance started: the meta leader carries the plan out one step at a time (run again for progress)")
	}
	return nil
}
