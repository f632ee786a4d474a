package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/raftq/raftq/backup"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/tlsconf"
)

// Config configures one node.
// MaxClusterNameLen is memberlist's limit on a label.
const MaxClusterNameLen = 255

type Config struct {
	NodeID  string
	DataDir string
	// GRPCAddr is the advertised client gRPC address and PeerAddr the
	// advertised peer address (--peer-bind), both carried in gossip
	// metadata.
	GRPCAddr, PeerAddr string
	// RaftBind/RaftAdvertise: the raftmux port every raft group shares.
	RaftBind, RaftAdvertise string
	// RaftMaxConns caps the inbound raft connections the node holds at
	// once (raftmux.Options.MaxConns): 0, raftmux.DefaultMaxConns;
	// negative, no cap.
	RaftMaxConns int
	// RaftIdleTimeout closes an inbound raft connection idle this long
	// (raftmux.Options.IdleTimeout): 0, raftmux.DefaultIdleTimeout;
	// negative, never.
	RaftIdleTimeout time.Duration
	// GossipBind/GossipAdvertise: memberlist host:port (TCP and UDP).
	GossipBind, GossipAdvertise string
	// Join lists seed gossip addresses; the node retries until one answers.
	Join []string
	// ClusterName, if set, labels every gossip message (memberlist's
	// Label): nodes with different names ignore each other, so a node can
	// never be pulled into another cluster whose members still gossip to
	// an address it now holds (a reused port or IP). Empty: no label,
	// which only talks to other unlabelled nodes.
	ClusterName string
	// BootstrapExpect is set only on the initial voters, all to the same
	// value: they bootstrap the meta group once exactly that many of them
	// see each other. 0: never bootstrap (join an existing cluster).
	BootstrapExpect int
	// Shards is the number of data shards placed at bootstrap (it grows
	// later only through SetShardCount). Default:
	// one per Replication bootstrap voters, rounded up (1 on a 3-node
	// cluster), so each node holds one replica. Every raft group has fixed
	// costs (a log append and its fsync per round on every replica,
	// heartbeats, goroutines) and groups do not share commits, so a few
	// busy groups beat many quiet ones: on a 3-node cluster on one 2-core
	// machine 1 shard carries about 1.2x the messages of 3, at half the
	// enqueue p99, and 3 carry 1.5x those of 8 (docs/benchmarks.md, "Shard
	// count"). On a 3-node cluster every node holds every shard anyway;
	// more shards only spread leadership, which pays when each node has
	// cores of its own to spare.
	Shards uint32
	// Replication is the number of replicas per shard (default 3).
	Replication int
	// Now is the node's clock: it stamps shard and meta entries and is the
	// clock the clock check compares with the peers' (tests inject skew).
	Now func() time.Time
	// MaxClockOffset bounds this node's clock offset from the median
	// clock of the live members: beyond it the node does not lead
	// (docs/clock.md); default shard.MaxClockSkew. Set the
	// same on every node.
	MaxClockOffset time.Duration
	Logger         *slog.Logger

	// TLS, if set, makes the raft port mutual TLS between members, and
	// a raft address learnt from gossip enters a configuration only after
	// it proved its node's identity (prove.go). nil: plaintext.
	TLS *tlsconf.Store
	// GossipKeys, if set, encrypt and authenticate every gossip message
	// (memberlist's keyring; incoming and outgoing are both checked): the
	// first key encrypts, every key decrypts, so keys rotate without a
	// partition (SetGossipKeys). nil: gossip in the clear.
	GossipKeys [][]byte

	// Raft tunes every raft group of the node (meta and shards).
	Raft raftgroup.RaftTuning
	// Disk says how every raft group's log and stable-store writes are
	// watched (raftgroup.DiskWatch): a write stalled past Disk.StallAfter
	// sidelines the replica until it completes; Disk.OnFatal is called on
	// a write error other than lack of space and must stop the process.
	Disk raftgroup.DiskOptions
	// DiskReserve is the free space the node keeps in DataDir: below it,
	// new sends to the shards it leads are refused (RESOURCE_EXHAUSTED).
	// Zero: never refuse.
	DiskReserve DiskReserve
	// MemoryBudget is the memory the node may use, in bytes: above 60 %
	// of it in live heap, new sends to the shards it leads are refused
	// (RESOURCE_EXHAUSTED; memguard.go). Zero: never refuse.
	MemoryBudget uint64
	// NonvoterGrace is how long a member must be alive in gossip before the
	// meta leader adds it as a nonvoter (default 2 s).
	NonvoterGrace time.Duration
	// DeadNodeGrace is how long a member must be continuously not alive
	// in gossip before the meta leader drains it: its replicas are
	// re-created on live nodes and its id retired (deadnodes.go). Default
	// 5 min; negative disables.
	DeadNodeGrace time.Duration
	// MoveEvery paces the meta leader's move executor (moves.go): one
	// step of a replica move per round at most (default 1 s). Tests slow
	// it to hold a move at a step.
	MoveEvery time.Duration
	// DeleteGrace is how long a queue must be absent from the local meta
	// replica before reconciliation deletes it from a shard (default 10 s),
	// so a lagging meta view never deletes a freshly created queue.
	DeleteGrace time.Duration
	// PreferredLeaderDelay is how long a node leads a shard before handing
	// it to the shard's preferred replica (first in the map), when that
	// replica is alive; this spreads shard leaders over the nodes (default
	// 5 s).
	PreferredLeaderDelay time.Duration
	// DisableRebalance turns automatic rebalancing off: the meta leader
	// then moves replicas and preferred leaders only when an operator asks
	// (raftq cluster rebalance).
	DisableRebalance bool
	// RebalanceStable is how long the eligible nodes and the meta servers
	// must stay the same before the meta leader rebalances on its own
	// (default 10 s): a node that restarts or flaps does not get replicas
	// moved around it.
	RebalanceStable time.Duration
	// Version is advertised in gossip metadata (default: the binary's
	// build info, fsm.BinaryVersion).
	Version string
	// Repair lets the node repair its damaged or lost replicas: each is
	// removed from its raft group and re-added empty, through raft. Off,
	// a node that finds its meta replica damaged refuses to start (it
	// says why), and damaged shard replicas wait for `raftq cluster
	// repair`. A data directory empty while the cluster lists the node is
	// re-added either way (identity.go): it never took part in raft.
	Repair bool
	// DigestInterval is how often a shard leader compares its replicas'
	// state digests (cluster/digests.go): default 2 min, stretched so the
	// hashing takes at most ~2 % of the time; negative disables.
	DigestInterval time.Duration
	// Peers reaches other nodes for identity checks and repair; default:
	// their Node gRPC service at their advertised gRPC address.
	Peers PeerClient
	// Restore, if set, builds a new cluster from a backup (raftq-node
	// --restore): every bootstrap voter sets the same one. The meta leader
	// restores the backup's queues with a shard map placed over this
	// cluster's voters instead of placing an empty one, and every replica
	// of a shard starts from the shard's piece (docs/backup.md,
	// "Restore"). A node with meta state refuses it.
	Restore *backup.Source
	// Fatal is called when the node must stop (its meta replica found
	// damaged bytes, it lost its state, it belongs to another cluster);
	// the process should exit with err. Default: log it.
	Fatal func(error)

	// logFormat is the log format this node advertises (gossip
	// NodeMeta.log_format) for the meta leader to record: fsm.LogFormat
	// unless a test pins another to stand for a node of another release
	// (docs/logformats.md).
	logFormat uint32
}

// DefaultDeadNodeGrace is Config.DeadNodeGrace's default: long enough for
// a reboot or a rolling upgrade, short enough that a lost machine does not
// leave its shards one failure from unavailability for long.
const DefaultDeadNodeGrace = 5 * time.Minute

// DefaultShards is the shard count a cluster bootstrapped by voters nodes
// with replication replicas per shard gets when none is set: one shard per
// replication voters, rounded up, at least 1.
func DefaultShards(voters, replication int) uint32 {
	replication = max(replication, 1)
	voters = max(voters, replication)
	return uint32((voters + replication - 1) / replication)
}

func (c Config) withDefaults() (Config, error) {
	if c.NodeID == "" || c.DataDir == "" {
		return c, errors.New("cluster: NodeID and DataDir are required")
	}
	if c.RaftBind == "" || c.GossipBind == "" {
		return c, errors.New("cluster: RaftBind and GossipBind are required")
	}
	if c.BootstrapExpect < 0 {
		return c, fmt.Errorf("cluster: BootstrapExpect %d < 0", c.BootstrapExpect)
	}
	if c.TLS != nil {
		if id := c.TLS.Identity(); id != (tlsconf.Identity{Role: tlsconf.RoleNode, Name: c.NodeID}) {
			return c, fmt.Errorf("cluster: the TLS certificate is that of %s, not node/%s: a node's id is bound to its certificate", id, c.NodeID)
		}
	}
	if len(c.ClusterName) > MaxClusterNameLen {
		return c, fmt.Errorf("cluster: ClusterName is %d bytes, at most %d", len(c.ClusterName), MaxClusterNameLen)
	}
	if c.Replication <= 0 {
		c.Replication = 3
	}
	if c.Restore != nil {
		if c.BootstrapExpect <= 0 {
			return c, errors.New("cluster: a restore builds a new cluster: it needs BootstrapExpect (--bootstrap-expect) on every initial voter")
		}
		if n := c.Restore.ShardCount(); c.Shards != 0 && c.Shards != n {
			return c, fmt.Errorf("cluster: the backup has %d shards and Shards is %d: a restored cluster keeps the backup's shard count (message ids name their shard); leave --shards unset or set it to %d", n, c.Shards, n)
		}
		c.Shards = c.Restore.ShardCount()
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards(c.BootstrapExpect, c.Replication)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxClockOffset < 0 {
		return c, fmt.Errorf("cluster: MaxClockOffset %v < 0", c.MaxClockOffset)
	}
	if c.MaxClockOffset == 0 {
		c.MaxClockOffset = shard.MaxClockSkew
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.NonvoterGrace <= 0 {
		c.NonvoterGrace = 2 * time.Second
	}
	if c.MoveEvery <= 0 {
		c.MoveEvery = moveEvery
	}
	if c.DeadNodeGrace == 0 {
		c.DeadNodeGrace = DefaultDeadNodeGrace
	}
	if c.DeleteGrace <= 0 {
		c.DeleteGrace = 10 * time.Second
	}
	if c.PreferredLeaderDelay <= 0 {
		c.PreferredLeaderDelay = 5 * time.Second
	}
	if c.RebalanceStable <= 0 {
		c.RebalanceStable = 10 * time.Second
	}
	if c.Version == "" {
		c.Version = fsm.BinaryVersion()
	}
	if c.logFormat == 0 {
		c.logFormat = fsm.LogFormat
	}
	if c.DigestInterval == 0 {
		c.DigestInterval = 2 * time.Minute
	}
	if c.Peers == nil {
		c.Peers = newPeers(c.TLS)
	}
	if c.Fatal == nil {
		logger := c.Logger
		c.Fatal = func(err error) { logger.Error("node must stop", "err", err) }
	}
	return c, nil
}
