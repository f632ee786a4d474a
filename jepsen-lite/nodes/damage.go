package nodes

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/raftq/raftq/peer/peerpb"
)

// DataDir is node i's data directory on this machine: the damage nemesis
// changes its files while the node is stopped.
func (c *Cluster) DataDir(i int) string { return c.Nodes[i].Dir }

// StartRepair starts node i with --repair, and every later start of it
// too: a node killed while it rejoins its groups must still be able to
// start (without --repair, a node that lost its state refuses to).
// --repair changes nothing on a node with nothing damaged.
func (c *Cluster) StartRepair(i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	n.repair = true
	n.mu.Unlock()
	return c.Start(i, c.Offset(i))
}

// Repaired reports (nil) whether node i has no damaged replica left and
// is a voter again in the meta group and every shard group it hosts, as
// the node itself and every other running node see it (a node that does
// not host a shard cannot tell, so every answer must agree).
func (c *Cluster) Repaired(ctx context.Context, i int) error {
	id := c.Nodes[i].ID
	st, err := c.Status(ctx, i)
	if err != nil {
		return err
	}
	if len(st.GetDamaged()) > 0 {
		var gs []string
		for _, d := range st.GetDamaged() {
			gs = append(gs, d.GetGroup()+" ("+d.GetReason()+")")
		}
		return fmt.Errorf("%s still has damaged replicas: %s", id, strings.Join(gs, ", "))
	}
	asked := 0
	for j := range c.Nodes {
		if j == i || !c.Running(j) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		k, err := peerpb.NewPeerClient(c.peerConns[j]).Known(cctx, &peerpb.KnownRequest{NodeId: id})
		cancel()
		if err != nil || !k.GetHasState() {
			continue
		}
		asked++
		meta := false
		for _, g := range k.GetGroups() {
			if !g.GetVoter() {
				return fmt.Errorf("%s sees %s as a nonvoter of %s", c.Nodes[j].ID, id, g.GetGroup())
			}
			meta = meta || g.GetGroup() == "meta"
		}
		if !meta {
			return fmt.Errorf("%s does not list %s in the meta group", c.Nodes[j].ID, id)
		}
	}
	if asked == 0 {
		return fmt.Errorf("no other node answered for %s", id)
	}
	return nil
}
