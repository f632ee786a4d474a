package checker

import (
	"sort"
	"strconv"
	"strings"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// finalPhase: the evidence the other checkers lean on exists. Without a
// completed final phase, "delivered but not acked" cannot be told from
// "unfinished", a missing server record hides a message's fate, and
// replicas that never converged or were never compared may hold states
// nobody looked at. Each of these fails the run rather than passing it
// with less evidence.
//
//   - no-final-phase: the history has no completed final phase;
//     final-failed: it began and could not finish (heal, drain, ...).
//     Either is reported alone: what follows needs the final phase.
//   - missing-record: a message id the history names (an acknowledged
//     enqueue, a delivery, a DLQ entry) has no server record.
//   - not-converged: a shard the run has (the setup's count, or any id
//     below one compared: a growth adds shards) is missing from the comparison,
//     has fewer replicas than the run's replication, or its replicas are
//     not all at one applied index.
//   - not-compared: no replica comparison, or a replica gave no FSM
//     digest, or the digests were taken at different applied indexes.
//   - diverged: replicas at one applied index with different digests.
func finalPhase(ix *index) *Result {
	r := newResult("final")
	// Without a completed final phase, missing records and replicas not
	// compared are its consequences, not findings of their own.
	switch fp := ix.finalPhase; {
	case fp == nil:
		r.violate("no-final-phase", "the history has no completed final phase: nothing was drained, fetched or compared after the faults")
		return r
	case fp.Type != history.OK:
		r.violate("final-failed", "the final phase did not finish: %s", fp.Error)
		return r
	}
	for _, id := range ix.namedIDs() {
		if ix.finals[id] == nil {
			r.violate("missing-record", "%s (value %q) has no server record: its final state is unknown", id, ix.msgValue[id])
		} else {
			r.Count["records"]++
		}
	}
	replicaChecks(ix, r)
	return r
}

// namedIDs is every message id the history names: acknowledged enqueues,
// deliveries and DLQ entries (what the final phase fetches).
func (ix *index) namedIDs() []string {
	ids := map[string]bool{}
	for _, e := range ix.enqOrder {
		for id := range e.ids {
			ids[id] = true
		}
	}
	for _, d := range ix.deliveries {
		ids[d.MessageID] = true
	}
	for id := range ix.dead {
		ids[id] = true
	}
	return keys(ids)
}

func replicaChecks(ix *index, r *Result) {
	if ix.replicas == nil {
		r.violate("not-compared", "the history has no replica comparison")
		return
	}
	shards := ix.replicas.Shards
	if s := ix.setup; s != nil && len(shards) < s.Shards {
		r.violate("not-converged", "the comparison has %d shards of the run's %d", len(shards), s.Shards)
	}
	// The setup's count is the start's and a growth adds to it (the
	// reshard nemesis); shard ids are 0..count-1 at any count, so a gap
	// is a shard missing from the comparison.
	ids := map[uint32]bool{}
	top := uint32(0)
	for _, sh := range shards {
		ids[sh.Shard] = true
		top = max(top, sh.Shard+1)
	}
	for id := range top {
		if !ids[id] {
			r.violate("not-converged", "shard %d is missing from the comparison (it lists shards up to %d)", id, top-1)
		}
	}
	for _, sh := range shards {
		r.Count["shards"]++
		if s := ix.setup; s != nil && len(sh.Replicas) < s.Replication {
			r.violate("not-converged", "shard %d: %d replicas %v of the run's %d", sh.Shard, len(sh.Replicas), sh.Replicas, s.Replication)
		}
		applied := map[uint64][]string{}
		for _, node := range sh.Replicas {
			a, ok := sh.Applied[node]
			if !ok {
				r.violate("not-converged", "shard %d: replica %s reported no applied index", sh.Shard, node)
				continue
			}
			applied[a] = append(applied[a], node)
		}
		if len(applied) > 1 {
			r.violate("not-converged", "shard %d: replicas at different applied indexes %s", sh.Shard, byIndex(applied))
		}
		digests := map[uint64]map[string][]string{} // applied index -> digest -> nodes
		for _, node := range sh.Replicas {
			d, ok := sh.Digests[node]
			if !ok {
				r.violate("not-compared", "shard %d: replica %s gave no FSM digest (%s)", sh.Shard, node, strings.Join(sh.Errors, "; "))
				continue
			}
			i, hash, _ := strings.Cut(d, ":")
			idx, err := strconv.ParseUint(i, 10, 64)
			if err != nil {
				r.violate("not-compared", "shard %d: replica %s gave an unreadable digest %q", sh.Shard, node, d)
				continue
			}
			if digests[idx] == nil {
				digests[idx] = map[string][]string{}
			}
			digests[idx][hash] = append(digests[idx][hash], node)
			r.Count["replicas-compared"]++
		}
		if len(digests) > 1 {
			r.violate("not-compared", "shard %d: digests taken at different applied indexes, so not compared: %v", sh.Shard, sh.Digests)
		}
		for idx, byHash := range digests {
			if len(byHash) > 1 {
				r.violate("diverged", "shard %d: replicas at applied index %d have different FSM digests: %v", sh.Shard, idx, sh.Digests)
			}
		}
	}
}

// byIndex prints applied index -> replicas in index order.
func byIndex(m map[uint64][]string) string {
	idx := make([]uint64, 0, len(m))
	for i := range m {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	var parts []string
	for _, i := range idx {
		parts = append(parts, strings.Join(m[i], ",")+"="+strconv.FormatUint(i, 10))
	}
	return strings.Join(parts, " ")
}
