package meta

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/raftq/raftq/meta/metapb"
)

// Replica moves change the shard map one step at a time, each step a meta
// command the FSM checks against the move record it keeps, so that the
// move executor (cluster/moves.go) can act on a phase only once the phase
// is committed, and a new meta leader resumes from the record:
//
//	ADD      to joins the map as a learner; the group adds it as a nonvoter
//	PROMOTE  to becomes a voter in the map; the group promotes it
//	REMOVE   the group removes from (to is a voter by now)
//	DONE     from leaves the map; the record is dropped
//
// At most one move per shard runs at a time, and from is removed only
// after to is a voter, so a move never leaves a group with fewer voters
// than it had.
//
// A move with no from is a top-up: it adds a replica to a shard that has
// fewer than the cluster's replication (placed over too few nodes), and
// its REMOVE and DONE steps remove nothing. Top-ups need log format 9
// (topUpFormat): a replica of format 8 refuses a move without a source.

// Move is a running replica move as the map records it.
type Move struct {
	Shard    uint32
	From, To string
	Phase    metapb.MovePhase
	// Aborting: an abort is recorded (AbortMove); the executor removes To
	// from the group and finishes it.
	Aborting bool
}

// String is the move as the CLI shows it: "shard 0: n3 -> n4 (add)",
// "shard 0: top-up -> n4 (promote)".
func (mv Move) String() string {
	from, phase := mv.From, phaseName(mv.Phase)
	if from == "" {
		from = "top-up"
	}
	if mv.Aborting {
		phase = "aborting"
	}
	return fmt.Sprintf("shard %d: %s -> %s (%s)", mv.Shard, from, mv.To, phase)
}

// MoveOf returns the running move of shard, if any.
func (m ShardMap) MoveOf(shard uint32) (Move, bool) {
	for _, mv := range m.Moves {
		if mv.Shard == shard {
			return mv, true
		}
	}
	return Move{}, false
}

// Drain is a node being drained (DrainNode): To is "" when each replica
// goes to the least loaded node.
type Drain struct{ Node, To string }

// IsRetired reports whether node was retired (RetireNode).
func (m ShardMap) IsRetired(node string) bool { return slices.Contains(m.Retired, node) }

// MoveStep records one phase of the move of shard's replica from one node
// to another; see the phases above. A step the map already records
// changes nothing and succeeds. Steps the record does not allow are
// refused with ErrRefused.
func (s *Store) MoveStep(ctx context.Context, shard uint32, from, to, toRaftAddr string, phase metapb.MovePhase) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_MoveStep{MoveStep: &metapb.MoveStep{
		Shard: shard, From: from, To: to, ToRaftAddr: toRaftAddr, Phase: phase}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("move shard %d from %s to %s, %s: %w", shard, from, to, phaseName(phase), err)
	}
	return nil
}

// RetireNode retires a node id for good once no shard places a replica on
// it; retiring a retired node succeeds.
func (s *Store) RetireNode(ctx context.Context, node string) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_RetireNode{RetireNode: &metapb.RetireNode{NodeId: node}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("retire node %s: %w", node, err)
	}
	return nil
}

// PhaseName is a move phase as people read it: "add", "promote".
func PhaseName(p metapb.MovePhase) string { return phaseName(p) }

func phaseName(p metapb.MovePhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "MOVE_PHASE_"))
}

func refusal(format string, args ...any) *metapb.Result {
	return &metapb.Result{Code: metapb.Code_CODE_REFUSED, Message: fmt.Sprintf(format, args...)}
}

func (f *FSM) moveStep(c *metapb.MoveStep) *metapb.Result {
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	from, to := c.GetFrom(), c.GetTo()
	if to == "" || from == to {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "a move needs a target node other than its source"}
	}
	var sr *metapb.ShardReplicas
	for _, r := range f.shardMap.GetShards() {
		if r.GetShard() == c.GetShard() {
			sr = r
		}
	}
	if sr == nil {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("no shard %d", c.GetShard())}
	}
	mi := slices.IndexFunc(f.shardMap.GetMoves(), func(m *metapb.Move) bool { return m.GetShard() == c.GetShard() })
	var mv *metapb.Move
	if mi >= 0 {
		mv = f.shardMap.GetMoves()[mi]
		if mv.GetFrom() != from || mv.GetTo() != to {
			return refusal("shard %d: the move of its replica on %s to %s is running; one move per shard at a time", c.GetShard(), mv.GetFrom(), mv.GetTo())
		}
		if c.GetPhase() <= mv.GetPhase() {
			return &metapb.Result{} // recorded already: a retried step
		}
		if mv.GetAborting() {
			return refusal("shard %d: the move from %s to %s is being aborted", c.GetShard(), from, to)
		}
		if c.GetPhase() != mv.GetPhase()+1 {
			return refusal("shard %d: the move from %s to %s is at %s; it cannot skip to %s", c.GetShard(), from, to, phaseName(mv.GetPhase()), phaseName(c.GetPhase()))
		}
	}
	switch c.GetPhase() {
	case metapb.MovePhase_MOVE_PHASE_ADD:
		switch {
		case slices.Contains(f.shardMap.GetRetired(), to):
			return refusal("node %s is retired", to)
		case from != "" && !slices.Contains(sr.GetNodes(), from):
			return refusal("shard %d has no replica on %s", c.GetShard(), from)
		case slices.Contains(sr.GetNodes(), to) || slices.Contains(sr.GetLearners(), to):
			return refusal("shard %d already has a replica on %s", c.GetShard(), to)
		case c.GetToRaftAddr() == "":
			return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "the raft address of the new replica is required"}
		}
		sr.Learners = append(sr.Learners, to)
		f.setAddr(to, c.GetToRaftAddr())
		f.shardMap.Moves = append(f.shardMap.Moves, &metapb.Move{Shard: c.GetShard(), From: from, To: to, Phase: c.GetPhase()})
		slices.SortFunc(f.shardMap.Moves, func(a, b *metapb.Move) int { return int(a.GetShard()) - int(b.GetShard()) })
	case metapb.MovePhase_MOVE_PHASE_PROMOTE:
		if mv == nil {
			return refusal("shard %d: no move from %s to %s is running", c.GetShard(), from, to)
		}
		sr.Learners = slices.DeleteFunc(sr.Learners, func(n string) bool { return n == to })
		sr.Nodes = append(sr.Nodes, to)
		mv.Phase = c.GetPhase()
	case metapb.MovePhase_MOVE_PHASE_REMOVE:
		// The phase order already keeps from until to is a voter; this
		// states the rule itself: removing from must not leave the group
		// with fewer voters than before the move.
		if mv == nil {
			return refusal("shard %d: no move from %s to %s is running", c.GetShard(), from, to)
		}
		if !slices.Contains(sr.GetNodes(), to) || len(sr.GetNodes()) < 2 {
			return refusal("shard %d: removing %s before %s is a voter would shrink the group below its size", c.GetShard(), from, to)
		}
		mv.Phase = c.GetPhase()
	case metapb.MovePhase_MOVE_PHASE_DONE:
		if mv == nil {
			if (from == "" || !slices.Contains(sr.GetNodes(), from)) && slices.Contains(sr.GetNodes(), to) {
				return &metapb.Result{} // finished already: a retried step
			}
			return refusal("shard %d: no move from %s to %s is running", c.GetShard(), from, to)
		}
		sr.Nodes = slices.DeleteFunc(sr.Nodes, func(n string) bool { return n == from })
		f.shardMap.Moves = slices.Delete(f.shardMap.Moves, mi, mi+1)
	default:
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("unknown move phase %v", c.GetPhase())}
	}
	if c.GetPhase() != metapb.MovePhase_MOVE_PHASE_REMOVE {
		sr.Changes++ // the replica set changed
	}
	f.shardMap.Version++
	return &metapb.Result{}
}

// topUpFormat is the log format a move or abort without a source needs:
// a replica of format 8 refuses it as invalid, which would leave its map
// apart from its leader's.
func topUpFormat(c *metapb.Command) uint32 {
	switch k := c.GetCmd().(type) {
	case *metapb.Command_MoveStep:
		if k.MoveStep.GetFrom() == "" {
			return 9
		}
	case *metapb.Command_AbortMove:
		if k.AbortMove.GetFrom() == "" {
			return 9
		}
	}
	return 0
}

// setAddr records node's raft address in the map, sorted by node id.
func (f *FSM) setAddr(node, addr string) {
	for _, n := range f.shardMap.GetNodes() {
		if n.GetNodeId() == node {
			n.RaftAddr = addr
			return
		}
	}
	f.shardMap.Nodes = append(f.shardMap.Nodes, &metapb.NodeAddr{NodeId: node, RaftAddr: addr})
	slices.SortFunc(f.shardMap.Nodes, func(a, b *metapb.NodeAddr) int { return strings.Compare(a.GetNodeId(), b.GetNodeId()) })
}

func (f *FSM) retireNode(c *metapb.RetireNode) *metapb.Result {
	id := c.GetNodeId()
	if id == "" {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "node id required"}
	}
	if f.shardMap == nil {
		return refusal("no shard map is placed")
	}
	if slices.Contains(f.shardMap.GetRetired(), id) {
		return &metapb.Result{}
	}
	for _, sr := range f.shardMap.GetShards() {
		if slices.Contains(sr.GetNodes(), id) || slices.Contains(sr.GetLearners(), id) {
			return refusal("node %s still holds a replica of shard %d; move it first", id, sr.GetShard())
		}
	}
	f.shardMap.Retired = append(f.shardMap.Retired, id)
	slices.Sort(f.shardMap.Retired)
	f.shardMap.Drains = slices.DeleteFunc(f.shardMap.Drains, func(d *metapb.DrainNode) bool { return d.GetNodeId() == id })
	f.shardMap.Version++
	return &metapb.Result{}
}

func (f *FSM) drainNode(c *metapb.DrainNode) *metapb.Result {
	id, to := c.GetNodeId(), c.GetTo()
	switch {
	case id == "" || id == to:
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "a node id (and a different target) required"}
	case f.shardMap == nil:
		return refusal("no shard map is placed")
	case slices.Contains(f.shardMap.GetRetired(), id):
		return &metapb.Result{} // drained and retired already
	case slices.Contains(f.shardMap.GetRetired(), to):
		return refusal("node %s is retired", to)
	}
	for _, d := range f.shardMap.GetDrains() {
		switch {
		case d.GetNodeId() == id && d.GetTo() == to:
			return &metapb.Result{}
		case d.GetNodeId() == id:
			return refusal("node %s is being drained to %q already", id, d.GetTo())
		case d.GetNodeId() == to:
			return refusal("node %s is being drained itself", to)
		case d.GetTo() == id && id != "":
			return refusal("node %s is the target of the drain of %s", id, d.GetNodeId())
		}
	}
	f.shardMap.Drains = append(f.shardMap.Drains, &metapb.DrainNode{NodeId: id, To: to})
	f.shardMap.Version++
	return &metapb.Result{}
}

// DrainNode records that node is to be drained (to to, or "" for the
// least loaded nodes) and retired; see metapb.DrainNode.
func (s *Store) DrainNode(ctx context.Context, node, to string) error {
	cmd := &metapb.Command{Cmd: &metapb.Command_DrainNode{DrainNode: &metapb.DrainNode{NodeId: node, To: to}}}
	if _, err := s.apply(ctx, cmd); err != nil {
		return fmt.Errorf("drain node %s: %w", node, err)
	}
	return nil
}
