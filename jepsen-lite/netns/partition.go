package netns

import (
	"context"
	"fmt"
)

// Cut drops all traffic between node i and node j (0-based), both ways and
// in both namespaces, so neither a SYN nor a late packet gets through.
func (n *Net) Cut(ctx context.Context, i, j int) error {
	a, b := n.Nodes[i], n.Nodes[j]
	for _, side := range []struct{ ns, peer string }{{a.Name, b.IP}, {b.Name, a.IP}} {
		for _, rule := range [][]string{
			{"-A", "INPUT", "-s", side.peer, "-j", "DROP"},
			{"-A", "OUTPUT", "-d", side.peer, "-j", "DROP"},
		} {
			args := append([]string{"netns", "exec", side.ns, "iptables", "-w"}, rule...)
			if err := run(ctx, "ip", args...); err != nil {
				return fmt.Errorf("cut %d-%d: %w", i, j, err)
			}
		}
	}
	return nil
}

// Heal removes every rule in every namespace.
func (n *Net) Heal(ctx context.Context) error {
	var first error
	for _, ns := range n.Nodes {
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			if err := run(ctx, "ip", "netns", "exec", ns.Name, "iptables", "-w", "-F", chain); err != nil && first == nil {
				first = fmt.Errorf("heal %s: %w", ns.Name, err)
			}
		}
	}
	return first
}

// Partition cuts every pair of nodes that sit in different components. A
// node listed in no component keeps all its links (a bridge between sides).
func (n *Net) Partition(ctx context.Context, components [][]int) error {
	comp := map[int]int{}
	for c, nodes := range components {
		for _, i := range nodes {
			comp[i] = c
		}
	}
	for i := range n.Nodes {
		for j := i + 1; j < len(n.Nodes); j++ {
			ci, iok := comp[i]
			cj, jok := comp[j]
			if iok && jok && ci != cj {
				if err := n.Cut(ctx, i, j); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// CutOneWay drops every packet node from sends to node to (0-based) where
// it arrives, in to's namespace, and nothing else: to still reaches from,
// and TCP segments and their acknowledgements are lost only one way, as in
// a gray failure where one side's receive path is broken. Dropping on
// arrival rather than on departure matters: an OUTPUT rule makes the
// sender's own socket calls fail at once (EPERM), which no real network
// does. Heal removes it with the rest.
func (n *Net) CutOneWay(ctx context.Context, from, to int) error {
	src, dst := n.Nodes[from], n.Nodes[to]
	if err := run(ctx, "ip", "netns", "exec", dst.Name, "iptables", "-w", "-A", "INPUT", "-s", src.IP, "-j", "DROP"); err != nil {
		return fmt.Errorf("cut %d->%d: %w", from, to, err)
	}
	return nil
}
