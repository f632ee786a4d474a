package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftstore"
)

// A node whose data directory has no identity (new, or wiped) must not
// take part in raft until it knows which: a member that lost its state and
// came back empty under its old name would vote for any candidate and
// acknowledge entries it then forgets, so a quorum could form without the
// writes it had acknowledged. Until verified the node's raft traffic is
// isolated (raftmux.SetIsolated); it asks a member that has meta state
// which groups list its id. None: it is new. Some: it lost its state, so
// it is removed from those groups and re-added empty, through raft, as a
// fresh replica (it never voted under this identity: it was isolated). A
// retired id stays out (retired.go). A brand-new cluster (every expected
// member without state) verifies itself.

const verifyEvery = 250 * time.Millisecond

// verified is closed once the node's identity is settled.
func (n *Node) verifiedCh() <-chan struct{} { return n.verified }

func (n *Node) settle(clusterID string) error {
	if clusterID != "" {
		if err := n.ident.SetClusterID(clusterID); err != nil {
			return err
		}
	}
	if err := n.ident.SetVerified(true); err != nil {
		return err
	}
	n.mux.SetIsolated(false)
	n.verifiedOnce.Do(func() { close(n.verified) })
	return nil
}

// verifyLoop runs until the node's identity is settled.
func (n *Node) verifyLoop(ctx context.Context) {
	tick := time.NewTicker(verifyEvery)
	defer tick.Stop()
	waiting := false
	for {
		done, err := n.tryVerify(ctx)
		switch {
		case err != nil:
			n.logger.Warn("identity check: will retry", "err", err)
		case done:
			return
		case !waiting:
			waiting = true
			n.logger.Info("identity check: this node has no raft state; waiting for a member with state to say whether it is new (it takes no part in raft until then)")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-n.gossip.events:
		}
	}
}

// tryVerify settles the node's identity if the members it sees allow it.
func (n *Node) tryVerify(ctx context.Context) (bool, error) {
	alive := n.gossip.alive()
	var withState []member
	for _, m := range alive {
		if m.NodeID != n.cfg.NodeID && m.meta.GetHasState() {
			withState = append(withState, m)
		}
	}
	if len(withState) == 0 {
		if n.cfg.BootstrapExpect > 0 {
			if _, verdict, _ := bootstrapCandidates(alive, n.cfg.BootstrapExpect, false, restoreID(n.cfg.Restore)); verdict == bootstrapNow {
				n.logger.Info("identity check: every expected member is new; this is a new cluster")
				n.formedNew.Store(true)
				return true, n.settle("")
			}
		}
		return false, nil
	}
	var lastErr error
	for _, m := range withState {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := n.cfg.Peers.Known(cctx, m.Member, &peerpb.KnownRequest{NodeId: n.cfg.NodeID})
		cancel()
		if err != nil {
			lastErr = fmt.Errorf("ask %s: %w", m.NodeID, err)
			continue
		}
		if !resp.GetHasState() {
			continue
		}
		if a := resp.GetAliveGossipAddr(); a != "" && a != n.gossip.selfAddr {
			// Another process runs under this id (or the old one is not
			// yet declared dead): re-adding this one would throw a live
			// replica out of its groups. Wait until gossip says it is gone.
			return false, fmt.Errorf("%s sees node id %s alive at gossip address %s, not this node's %s: "+
				"if another process runs under this id, stop one of them; a crashed one is declared dead within seconds",
				m.NodeID, n.cfg.NodeID, a, n.gossip.selfAddr)
		}
		return true, n.verifyWith(ctx, resp)
	}
	return false, lastErr
}

// verifyWith acts on what a member with state said of this node.
func (n *Node) verifyWith(ctx context.Context, resp *peerpb.KnownResponse) error {
	if resp.GetRetired() {
		n.stayOutRetired()
		return nil
	}
	lost := n.lostGroups(resp.GetGroups())
	if len(lost) == 0 {
		n.logger.Info("identity check: the cluster does not know this node: it joins as a new member")
		return n.settle(resp.GetClusterId())
	}
	names := make([]string, len(lost))
	for i, g := range lost {
		names[i] = g.GetGroup()
	}
	// Until verified the node's raft traffic is isolated, so nothing in its
	// directory ever voted or acknowledged an entry under this identity:
	// re-adding it empty, through raft, can forget nothing. That is what
	// --repair did; an empty directory no longer needs it.
	n.logger.Warn("identity check: the cluster lists this node but its data directory has no state for it (lost or wiped): "+
		"rejoining as a fresh replica: removed from each group, then re-added empty and caught up", "groups", names)
	for _, g := range lost {
		if err := n.groupChange(ctx, g.GetGroup(), peerpb.GroupChangeRequest_OP_REMOVE); err != nil {
			return fmt.Errorf("remove %s from %s: %w", n.cfg.NodeID, g.GetGroup(), err)
		}
		inc := ""
		if g.GetGroup() == metaGroup {
			// The meta replica was opened empty at start; keep it.
			inc = n.meta.Incarnation()
		}
		if err := n.ident.Rejoin(g.GetGroup(), inc, g.GetVoter()); err != nil {
			return err
		}
	}
	return n.settle(resp.GetClusterId())
}

// lostGroups are the groups the cluster lists this node in whose local
// replica is not intact: never created here, created empty (at this start,
// or at an earlier start that was refused before it took part: the meta
// replica is opened before the identity check, so a node restarted with
// --repair after a refused start finds an empty one that is not new), or
// marked for rejoining.
func (n *Node) lostGroups(listed []*peerpb.GroupMember) []*peerpb.GroupMember {
	var out []*peerpb.GroupMember
	for _, g := range listed {
		if g.GetGroup() == metaGroup {
			// Until verified the node's raft traffic is isolated, so a meta
			// replica without state never had any: it cannot stand for the
			// replica the cluster lists.
			if n.meta.Fresh() || n.rejoining(metaGroup) || !n.meta.HasState() {
				out = append(out, g)
			}
			continue
		}
		if n.intact(g.GetGroup()) {
			continue
		}
		out = append(out, g)
	}
	// Meta first: the node needs the shard map to reopen its shards.
	slices.SortStableFunc(out, func(a, b *peerpb.GroupMember) int {
		return boolInt(b.GetGroup() == metaGroup) - boolInt(a.GetGroup() == metaGroup)
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (n *Node) rejoining(group string) bool {
	_, ok := n.ident.Rejoining()[group]
	return ok
}

// intact reports whether node.json records group's replica as created here
// and not being rejoined: if it is damaged, opening it finds out.
func (n *Node) intact(group string) bool {
	id := n.ident.Identity()
	if id == nil {
		return false
	}
	e, ok := id.Groups[group]
	return ok && e.State == raftstore.GroupReady
}

// Known lists the raft groups whose configuration names nodeID, as this
// node's meta replica knows them.
func (n *Node) Known(nodeID string) *peerpb.KnownResponse {
	if n.retired.Load() {
		// Its meta replica is cut off and stale: it is nobody's authority.
		return &peerpb.KnownResponse{}
	}
	resp := &peerpb.KnownResponse{HasState: n.meta.HasState()}
	if nodeID != n.cfg.NodeID {
		if m, ok := n.gossip.get(nodeID); ok && m.State == "alive" {
			resp.AliveGossipAddr = m.GossipAddr
		}
	}
	if !resp.HasState {
		return resp
	}
	if f := n.meta.Raft().GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == nodeID {
				resp.Groups = append(resp.Groups, &peerpb.GroupMember{Group: metaGroup, Voter: s.Suffrage == raft.Voter})
			}
		}
	}
	m := n.meta.ShardMap()
	resp.ClusterId = m.ClusterID
	resp.Retired = m.IsRetired(nodeID)
	for _, id := range m.ShardsOf(nodeID) {
		voter := true
		if s := n.shards.get(id); s != nil {
			if f := s.Raft().GetConfiguration(); f.Error() == nil {
				voter = false
				for _, srv := range f.Configuration().Servers {
					if string(srv.ID) == nodeID {
						voter = srv.Suffrage == raft.Voter
					}
				}
			}
		}
		resp.Groups = append(resp.Groups, &peerpb.GroupMember{Group: shardGroup(id), Voter: voter})
	}
	return resp
}

func shardGroup(id uint32) string { return "shard-" + strconv.FormatUint(uint64(id), 10) }

// parseShardGroup is the inverse of shardGroup.
func parseShardGroup(group string) (uint32, bool) {
	s, ok := strings.CutPrefix(group, "shard-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 32)
	return uint32(id), err == nil
}

// recordClusterID keeps node.json's cluster id in step with the map; a
// data directory of another cluster stops the node.
func (n *Node) recordClusterID(m meta.ShardMap) {
	if m.ClusterID == "" {
		return
	}
	if err := n.ident.SetClusterID(m.ClusterID); err != nil {
		n.fatal(fmt.Errorf("cluster: %w", err))
	}
}
