package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// bootstrapStable is how long the same candidate set must be seen before
// bootstrapping, so a member that gossip is still spreading is not missed.
const bootstrapStable = 500 * time.Millisecond

// bootstrapLoop follows Consul's maybeBootstrap: a node with no meta raft
// state bootstraps the meta group once it sees exactly BootstrapExpect alive
// members advertising the same expect value, none of which has state. Every
// such node computes the identical configuration (voters sorted by node id),
// so raft accepts it from each, and ErrCantBootstrap is normal. Members with
// expect 0 are joiners: they never count and never bootstrap.
func (n *Node) bootstrapLoop(ctx context.Context) {
	// A node that may have lost its state must not bootstrap anything
	// before it knows (identity.go).
	select {
	case <-ctx.Done():
		return
	case <-n.verifiedCh():
	}
	expect := n.cfg.BootstrapExpect
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastKey string
	var since time.Time
	warned := map[string]bool{}
	warn := func(key, msg string, args ...any) {
		if !warned[key] {
			warned[key] = true
			n.logger.Warn(msg, args...)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n.meta.HasState() {
			n.gossip.announceState()
			return
		}
		// A node that verified itself as part of a new cluster (every
		// expected member without state, identity.go) bootstraps with the
		// others even if one of them got there first and now has state:
		// every initial voter must hold the configuration, or a group
		// whose first bootstrapper cannot lead (its clock is off, say)
		// never elects anyone.
		servers, verdict, detail := bootstrapCandidates(n.gossip.alive(), expect, n.formedNew.Load(), restoreID(n.cfg.Restore))
		switch verdict {
		case joinExisting:
			// A cluster exists: its meta leader will add this node.
			n.logger.Info("bootstrap: a member already has meta state; waiting to be added", "member", detail)
			return
		case tooMany:
			warn("too-many", "bootstrap: more members advertise bootstrap-expect than expected; not bootstrapping",
				"seen", len(servers), "expect", expect)
			continue
		case tooFew:
			if detail != "" {
				warn("expect-"+detail, "bootstrap: a member advertises a different bootstrap-expect or --restore backup; not counted",
					"member", detail, "ours", expect, "restore", restoreID(n.cfg.Restore))
			}
			lastKey = ""
			continue
		}
		var kb strings.Builder
		for _, s := range servers {
			kb.WriteString(string(s.ID) + "=" + string(s.Address) + ";")
		}
		if key := kb.String(); key != lastKey {
			lastKey, since = key, time.Now()
			continue
		}
		if time.Since(since) < bootstrapStable {
			continue
		}
		if !n.allProve(ctx, servers) {
			lastKey = ""
			continue
		}
		err := n.meta.Bootstrap(ctx, servers)
		switch {
		case err == nil:
			n.logger.Info("bootstrap: meta group bootstrapped", "voters", lastKey)
		case errors.Is(err, raft.ErrCantBootstrap):
			n.logger.Info("bootstrap: meta state exists; not bootstrapping")
		default:
			n.logger.Error("bootstrap: failed; retrying", "err", err)
			continue
		}
		n.gossip.announceState()
		return
	}
}

type bootstrapVerdict int

const (
	tooFew bootstrapVerdict = iota
	tooMany
	joinExisting
	bootstrapNow
)

// bootstrapCandidates decides from the alive members what a node with
// bootstrap-expect expect should do, and with which voters (sorted by id, so
// every initial node proposes the identical configuration). detail names a
// member with state (joinExisting) or one with a mismatched expect value
// or restore: initial voters that would start from different backups (or
// one from none) must never form one cluster, since each seeds its own
// replicas from its backup.
//
// With sameFormation, a member with state that advertises the same expect
// value counts as a candidate instead of making this node join: it is
// another initial voter of this formation that bootstrapped first.
func bootstrapCandidates(alive []member, expect int, sameFormation bool, restore string) ([]raft.Server, bootstrapVerdict, string) {
	var servers []raft.Server
	mismatch := ""
	for _, m := range alive {
		switch e := int(m.meta.GetBootstrapExpect()); {
		case m.meta.GetHasState() && !(sameFormation && e == expect):
			return nil, joinExisting, m.NodeID
		case e == 0:
		case e != expect || m.meta.GetRestore() != restore:
			mismatch = m.NodeID
		default:
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.NodeID), Address: raft.ServerAddress(m.RaftAddr)})
		}
	}
	slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	switch {
	case len(servers) > expect:
		return servers, tooMany, mismatch
	case len(servers) < expect:
		return servers, tooFew, mismatch
	}
	return servers, bootstrapNow, mismatch
}
