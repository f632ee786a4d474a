package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// LogFormat is the highest log format this binary applies. Each node
// advertises it (cluster), the meta group records every node's advertised
// value, and a leader proposes a command kind only once every replica of
// its group (voters and nonvoters) has recorded at least the kind's format
// (CommandFormat). Raise it
// when a release adds a command kind an older replica would stop on.
const LogFormat uint32 = 9

// BaseFormat is the format every raftq binary applies, including those that
// predate log formats and advertise none: a node with no recorded format is
// taken to be at BaseFormat.
const BaseFormat uint32 = 1

// commandFormat is the table of the log format each shard command kind
// needs; ok is false for a kind it does not list. Every kind must be listed
// (TestCommandFormatsCoverEveryKind); a new kind gets the LogFormat of the
// release that adds it, in a case of its own. A type switch, not a map by
// name: every proposal asks, and this costs nanoseconds.
func commandFormat(c *fsmpb.Command) (format uint32, ok bool) {
	switch u := c.GetCmd().(type) {
	case *fsmpb.Command_UpsertQueue:
		if UsesFanout(u.UpsertQueue.GetPolicy()) {
			return 8, true // topics and subscriptions (topics.go)
		}
		if usesPause(u.UpsertQueue) || usesResultBound(u.UpsertQueue.GetPolicy()) || usesDeadRetention(u.UpsertQueue) {
			return 7, true // queue pause (pause.go), job results (results.go), dead retention (deadretention.go)
		}
		if usesTenancy(u.UpsertQueue) {
			return 6, true
		}
		return 1, true
	case *fsmpb.Command_Enqueue:
		if usesUnique(u.Enqueue) || usesRetryPolicy(u.Enqueue) {
			return 7, true // unique jobs (unique.go), per-message retry policy (retry.go)
		}
		return 1, true
	case *fsmpb.Command_Ack:
		if usesResults(u.Ack) {
			return 7, true // job results (results.go)
		}
		return 1, true
	case *fsmpb.Command_DeleteQueue, *fsmpb.Command_PurgeQueue,
		*fsmpb.Command_Receive, *fsmpb.Command_Nack,
		*fsmpb.Command_Extend, *fsmpb.Command_DeadLetter, *fsmpb.Command_Redrive,
		*fsmpb.Command_DiscardDead, *fsmpb.Command_Tick, *fsmpb.Command_LeaderGrace,
		*fsmpb.Command_Cancel:
		return 1, true
	case *fsmpb.Command_SealSlots, *fsmpb.Command_UnsealSlots,
		*fsmpb.Command_HoldGroups, *fsmpb.Command_ReleaseGroups:
		return 4, true // growing the shard count
	case *fsmpb.Command_Snooze:
		return snoozeFormat, true
	}
	return 0, false
}

// usesTenancy reports whether an upsert needs format 6 (docs/tenancy.md):
// a replica of format 5 would ignore the quotas, which Apply enforces, and
// refuse a tenant's queue name, which Apply accepts; either way its state
// would part from its leader's.
func usesTenancy(u *fsmpb.UpsertQueue) bool {
	p := u.GetPolicy()
	return TenantOf(u.GetQueue()) != "" || p.GetQuotas() != nil || p.GetShardQuota() != nil
}

// snoozeFormat is the log format of the Snooze kind (fsm/cmd_snooze.go):
// a replica of format 6 would stop on it.
const snoozeFormat uint32 = 7

// CommandFormat is the log format a shard command needs from every replica.
// A kind missing from the table is taken to need LogFormat, so a forgotten
// entry holds the kind back until every replica runs this format, never
// less.
func CommandFormat(c *fsmpb.Command) uint32 {
	if c.GetCmd() == nil {
		return BaseFormat // empty: every replica refuses it alike
	}
	if n, ok := commandFormat(c); ok {
		return n
	}
	return LogFormat
}

// ErrFormatLag is matched (errors.Is) by a *FormatLagError.
var ErrFormatLag = errors.New("log format not yet supported by every replica")

// NodeFormat is one node's recorded log format.
type NodeFormat struct {
	NodeID string
	Format uint32
}

// FormatLagError refuses a proposal before it reaches the log: its command
// kind needs a log format that some replicas of the group have not
// recorded.
// Nothing was proposed; the proposal succeeds once those nodes run a binary
// of that format and have advertised it.
type FormatLagError struct {
	Group   string // raft group: "meta" or "shard-N"
	Kind    string // command kind (oneof field name)
	Need    uint32
	Lagging []NodeFormat // sorted by node id
}

func (e *FormatLagError) Error() string {
	lag := make([]string, len(e.Lagging))
	for i, n := range e.Lagging {
		lag[i] = fmt.Sprintf("%s (format %d)", n.NodeID, n.Format)
	}
	return fmt.Sprintf("%s: command %s needs log format %d, which replicas %s do not support yet: upgrade them first",
		e.Group, e.Kind, e.Need, strings.Join(lag, ", "))
}

// Is makes errors.Is(err, ErrFormatLag) hold.
func (e *FormatLagError) Is(target error) bool { return target == ErrFormatLag }

// CheckFormat returns a *FormatLagError if any of replicas (node ids) has a
// recorded format below need; formatOf returns a node's recorded format, 0
// if none is recorded (taken as BaseFormat). Formats at or below BaseFormat
// pass without looking at the replicas. Nonvoters count: one that meets a
// kind it lacks stops its whole node, the shard replicas it hosts with it.
func CheckFormat(group, kind string, need uint32, replicas []string, formatOf func(nodeID string) uint32) error {
	if need <= BaseFormat {
		return nil
	}
	var lag []NodeFormat
	for _, id := range replicas {
		f := BaseFormat
		if formatOf != nil {
			f = max(formatOf(id), BaseFormat)
		}
		if f < need {
			lag = append(lag, NodeFormat{NodeID: id, Format: f})
		}
	}
	if len(lag) == 0 {
		return nil
	}
	slices.SortFunc(lag, func(a, b NodeFormat) int { return strings.Compare(a.NodeID, b.NodeID) })
	return &FormatLagError{Group: group, Kind: kind, Need: need, Lagging: lag}
}
