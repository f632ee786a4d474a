package compose

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
)

// Network partitions the compose cluster with docker/partition.sh, which
// disconnects a container from the cluster network. A disconnected node
// has no network at all, so only cuts that isolate single nodes from one
// majority side can be made; CanPartition refuses the others, and the
// nemesis draws another shape.
type Network struct {
	P *Project
}

// Partition isolates every node outside the largest component; each of
// those components must be a single node and the components must cover
// every node.
func (n *Network) Partition(ctx context.Context, components [][]int) error {
	isolate, err := isolated(components, Nodes)
	if err != nil {
		return err
	}
	for _, i := range isolate {
		if err := n.script(ctx, "isolate", service(i)); err != nil {
			_ = n.Heal(context.WithoutCancel(ctx))
			return err
		}
	}
	return nil
}

// CanPartition says why components cannot be cut, or nil.
func (n *Network) CanPartition(components [][]int) error {
	_, err := isolated(components, Nodes)
	return err
}

// isolated is the sorted slots to disconnect for components, or why the
// cut cannot be made by disconnecting nodes.
func isolated(components [][]int, nodes int) ([]int, error) {
	seen := map[int]bool{}
	big := 0
	for k, comp := range components {
		for _, i := range comp {
			seen[i] = true
		}
		if len(comp) > len(components[big]) {
			big = k
		}
	}
	if len(seen) != nodes {
		return nil, fmt.Errorf("compose backend: partition %v leaves a node on both sides (bridge); partition.sh can only isolate", components)
	}
	var out []int
	for k, comp := range components {
		if k == big {
			continue
		}
		if len(comp) != 1 {
			return nil, fmt.Errorf("compose backend: partition %v has a minority of %d nodes; partition.sh isolates single nodes", components, len(comp))
		}
		out = append(out, comp[0])
	}
	slices.Sort(out)
	return out, nil
}

// Heal reconnects every isolated node with its fixed IP.
func (n *Network) Heal(ctx context.Context) error { return n.script(ctx, "heal-all") }

func (n *Network) script(ctx context.Context, args ...string) error {
	_, err := run(ctx, n.P.env, filepath.Join(n.P.Root, "docker", "partition.sh"), args...)
	return err
}
