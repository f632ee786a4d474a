package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/internal/connlimit"
	"github.com/raftq/raftq/metrics"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/shard"
)

// minDeadNodeGrace is the shortest --dead-node-grace: gossip takes a few
// seconds to call a member dead, and a replacement must never follow a
// single missed probe.
const minDeadNodeGrace = 5 * time.Second

// maxClockOffsetLimit caps --max-clock-offset: the bound lengthens every
// lease by twice it at each leader change, and a clock a minute off is
// broken, not skewed.
const maxClockOffsetLimit = time.Minute

// peerPortOffset places the default peer port beside the gRPC port. The
// default ports are 7101 gRPC, 7201 raft, 7301 gossip, 7401 HTTP: +400
// gives 7501, the next free block.
const peerPortOffset = 400

// offsetPort is addr with its port moved by off.
func offsetPort(addr string, off int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p+off > 65535 {
		return "", fmt.Errorf("port %q plus %d is not a port", port, off)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+off)), nil
}

// peerAdvertise is the default peer advertise address: peer-bind itself,
// or when it listens on every interface, the host clients are told
// (grpc-advertise) with peer-bind's port.
func peerAdvertise(peerBind, grpcAdvertise string) (string, error) {
	host, port, err := net.SplitHostPort(peerBind)
	if err != nil {
		return "", fmt.Errorf("--peer-bind %q: %w", peerBind, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return peerBind, nil
	}
	ghost, _, err := net.SplitHostPort(grpcAdvertise)
	if err != nil {
		return "", fmt.Errorf("--grpc-advertise %q: %w", grpcAdvertise, err)
	}
	return net.JoinHostPort(ghost, port), nil
}

// flagHelp is returned when --help was asked for; usage is already printed.
var flagHelp = flag.ErrHelp

// config is every knob of raftq-node. Each flag can also be set by the
// environment variable RAFTQ_<FLAG> (upper case, dashes as underscores);
// a flag on the command line wins.
type config struct {
	NodeID          string
	DataDir         string
	GRPCBind        string
	GRPCAdvertise   string
	PeerBind        string
	PeerAdvertise   string
	RaftBind        string
	RaftAdvertise   string
	GossipBind      string
	GossipAdvertise string
	HTTPBind        string
	Console         bool
	ConsoleHosts    string
	PprofBind       string
	RaftMetrics     bool
	// MetricsMaxQueues caps the queue label values (metrics.WithMaxQueueLabels).
	MetricsMaxQueues int
	// LogFormat is text or json (logformat.go).
	LogFormat       string
	LogStore        string
	WALSegmentSize  string
	DiskStall       time.Duration
	DiskReserve     string
	MemoryBudget    string
	MaxParked       int
	Join            string
	ClusterName     string
	BootstrapExpect int
	Shards          uint
	Replication     int
	ClockOffset     time.Duration
	MaxClockOffset  time.Duration
	ShutdownTimeout time.Duration
	LogLevel        string
	Repair          bool
	DeadNodeGrace   time.Duration
	Rebalance       bool
	RebalanceStable time.Duration
	Restore         string
	// TLS material and gossip keys (security.go); Insecure runs without.
	TLSCA, TLSCert, TLSKey string
	GossipKeyFile          string
	Insecure               bool
	// ClientAuth is "optional" or "require" (a client certificate on
	// every call but health checks).
	ClientAuth string
	// SnapshotThreshold and SnapshotInterval override raftgroup.RaftTuning's
	// snapshot schedule; zero keeps the defaults. For tests that need a
	// snapshot on disk within seconds (systest/damage_test.go).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration

	// Connection and stream limits (limits.go).
	MaxClientConns    int
	MaxStreamsPerConn int
	MaxRaftConns      int
	RaftIdleTimeout   time.Duration

	// OpenTelemetry tracing (tracing.go); off without OTLPEndpoint.
	OTLPEndpoint string
	OTLPInsecure bool
	TraceSample  float64
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("raftq-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	fs.StringVar(&c.NodeID, "node-id", host, "unique, stable node id (raft server id); keep it across restarts")
	fs.StringVar(&c.DataDir, "data-dir", "", "directory for raft logs, snapshots and state (default ./data/<node-id>)")
	fs.StringVar(&c.GRPCBind, "grpc-bind", "127.0.0.1:7101", "client gRPC listen address")
	fs.StringVar(&c.GRPCAdvertise, "grpc-advertise", "", "gRPC address clients use, and nodes name to clients as a shard's leader (default: grpc-bind)")
	fs.StringVar(&c.PeerBind, "peer-bind", "", fmt.Sprintf("node-to-node gRPC listen address: forwarding to shard leaders, replica digests, repair; only other nodes of the cluster need to reach it (default: grpc-bind's host, its port + %d)", peerPortOffset))
	fs.StringVar(&c.PeerAdvertise, "peer-advertise", "", "peer address other nodes dial (default: peer-bind, or with a wildcard host grpc-advertise's host and peer-bind's port)")
	fs.StringVar(&c.RaftBind, "raft-bind", "127.0.0.1:7201", "raft listen address, shared by all raft groups of the node")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", "", "raft address peers dial (default: raft-bind)")
	fs.StringVar(&c.GossipBind, "gossip-bind", "127.0.0.1:7301", "memberlist gossip listen address (TCP and UDP)")
	fs.StringVar(&c.GossipAdvertise, "gossip-advertise", "", "gossip address peers use (default: gossip-bind)")
	fs.StringVar(&c.HTTPBind, "http-bind", "127.0.0.1:7401", "HTTP listen address for /metrics and /healthz (empty disables)")
	fs.BoolVar(&c.Console, "console", true, "serve the web console on the HTTP port (docs/console.md); false: /metrics and /healthz only")
	fs.StringVar(&c.ConsoleHosts, "console-hosts", "", "comma-separated host names browsers may reach the console under, besides IP addresses and localhost (a request naming another host is refused: DNS rebinding)")
	fs.StringVar(&c.PprofBind, "pprof-bind", "", "loopback address to serve Go's profiles on (/debug/pprof/); empty, the default, serves none")
	fs.BoolVar(&c.RaftMetrics, "raft-metrics", true, "export hashicorp/raft's internal timings (commit, bolt StoreLogs, AppendEntries, FSM apply, snapshots) on /metrics as raftq_raft_internal_* (docs/metrics.md)")
	fs.IntVar(&c.MetricsMaxQueues, "metrics-max-queues", metrics.DefaultMaxQueueLabels, "queues that get a queue label of their own on /metrics; the rest are counted under queue=\"_other\" (docs/metrics.md)")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json (one JSON object per line, slog's JSON handler)")
	fs.StringVar(&c.LogStore, "log-store", raftgroup.LogStoreWAL, "raft log store of raft groups this node creates: wal (segment files, one fdatasync per append) or bolt (raft-boltdb); a group keeps the store it was created with")
	fs.StringVar(&c.WALSegmentSize, "wal-segment-size", "64MiB", "size of the raft log's segment files (--log-store wal) for raft groups this node creates; a segment's blocks are allocated as it fills")
	fs.DurationVar(&c.DiskStall, "disk-stall-timeout", raftgroup.DefaultStallAfter, "a raft log or stable-store write in flight this long makes the replica step aside (its followers elect another leader) until it completes; 0 disables")
	fs.StringVar(&c.DiskReserve, "disk-reserve", "512MiB,5%", "free space kept in --data-dir: below the largest of these sizes and percentages of the filesystem, new sends are refused with RESOURCE_EXHAUSTED (receives, acks and deletes go on); 0 disables")
	fs.StringVar(&c.MemoryBudget, "memory-budget", memoryBudgetAuto, "memory this node may use (e.g. 2GiB): with 60 % of it in live heap, new sends are refused with RESOURCE_EXHAUSTED (receives, acks and deletes go on), and Go's memory limit is set to it; auto: GOMEMLIMIT, else the cgroup's memory limit, else the machine's RAM; 0 disables")
	fs.IntVar(&c.MaxParked, "max-parked-receives", 10000, "most long-poll receives this node holds waiting at once; past it a receive is refused with RESOURCE_EXHAUSTED and a retry hint (0: no cap)")
	fs.IntVar(&c.MaxClientConns, "max-client-conns", 10000, fmt.Sprintf("most client connections served at once; calls on a connection past it are refused with RESOURCE_EXHAUSTED and a retry hint until one closes, and past a tenth more (at least %d) connections are closed on accept (0: no cap)", connlimit.DefaultCeiling(0)))
	fs.IntVar(&c.MaxStreamsPerConn, "max-streams-per-conn", 1000, fmt.Sprintf("most calls in flight on one client connection; a client past it waits for one to finish (0: no cap, else %d..%d)", minStreamsPerConn, maxStreamsPerConn))
	fs.IntVar(&c.MaxRaftConns, "max-raft-conns", raftmux.DefaultMaxConns, fmt.Sprintf("most inbound raft connections held at once; one past it is closed on accept and logged (0: no cap, else at least %d)", minRaftConns))
	fs.DurationVar(&c.RaftIdleTimeout, "raft-idle-timeout", raftmux.DefaultIdleTimeout, fmt.Sprintf("close an inbound raft connection that carried nothing for this long (0: never, else at least %v; nodes close their own idle connections after %v)", raftmux.MinIdleTimeout, raftmux.DialIdle))
	fs.StringVar(&c.Join, "join", "", "comma-separated gossip addresses of nodes to join (retried until one answers)")
	fs.StringVar(&c.ClusterName, "cluster-name", "", "label on every gossip message; nodes with a different name (or none) are ignored, so clusters sharing a network never merge (set the same on every node; changing it on a running cluster splits it)")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", 3, "form a new cluster once this many nodes with the same value have met; set 0 on nodes added to an existing cluster")
	fs.UintVar(&c.Shards, "shards", 0, "number of data shards, fixed when the cluster is bootstrapped; 0: one per --replication bootstrap voters, rounded up (1 on a 3-node cluster: few busy raft groups beat many quiet ones; docs/benchmarks.md, \"Shard count\")")
	fs.IntVar(&c.Replication, "replication", 3, "replicas per data shard; the meta leader tops shards with fewer up to it as nodes allow (raising it adds replicas, lowering it removes none)")
	fs.DurationVar(&c.ClockOffset, "clock-offset", 0, "TESTING ONLY: offset this node's clock (jepsen-lite clock skew)")
	fs.DurationVar(&c.MaxClockOffset, "max-clock-offset", shard.MaxClockSkew, "largest offset of this node's clock from the median clock of the live members that still lets it lead; beyond it the node hands leadership away and refuses to lead until its clock is back (docs/clock.md); set the same on every node")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 20*time.Second, "on SIGTERM: bound for draining calls and handing off leadership")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.Uint64Var(&c.SnapshotThreshold, "snapshot-threshold", 0, "TESTING: log entries after which a snapshot may be taken (0: the default, 8192; docs/shard.md)")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", 0, "TESTING: snapshot slot period shared by a group's voters (0: the default, 30s; docs/shard.md)")
	fs.StringVar(&c.Restore, "restore", "", "build a new cluster from the backup in this directory (raftq backup create): set it, with the same backup, on every initial voter, each with an empty data directory (docs/backup.md, \"Restore\")")
	fs.BoolVar(&c.Repair, "repair", false, "repair this node's damaged or lost replicas: each is removed from its raft group and re-added empty through raft (docs/operations.md); without it a node with a damaged meta replica refuses to start and damaged shard replicas are left out (an empty data directory rejoins without it)")
	fs.DurationVar(&c.DeadNodeGrace, "dead-node-grace", cluster.DefaultDeadNodeGrace, fmt.Sprintf("a member not alive in gossip for this long without a break is replaced: its replicas are re-created on live nodes and its id retired, when enough live nodes exist (docs/cluster.md, \"Dead nodes\"); at least %v, 0 disables; set the same on every node (the meta leader's applies)", minDeadNodeGrace))
	fs.BoolVar(&c.Rebalance, "rebalance", true, "on the meta leader: move replicas and preferred leaders on its own so every live node holds within 1 of the mean (a joining node receives its share); false: only when `raftq cluster rebalance` asks (docs/cluster.md, \"Rebalancing\")")
	fs.DurationVar(&c.RebalanceStable, "rebalance-stable", 10*time.Second, "how long the live nodes and meta servers must stay the same before the meta leader rebalances on its own")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "PEM file of the CA that signs the cluster's certificates: nodes accept only members it signed, clients check nodes against it")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM file of this node's certificate (its node id is bound to it: raftq certs node); served on every port, presented when dialing other nodes; reloaded on SIGHUP")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM file of this node's private key; reloaded on SIGHUP")
	fs.StringVar(&c.GossipKeyFile, "gossip-key-file", "", "file of base64 gossip encryption keys, one per line, the first encrypting (raftq certs writes one); reloaded on SIGHUP")
	fs.StringVar(&c.ClientAuth, "client-auth", "", "credentials on the gRPC port: require (every call but health checks needs an API key or a client certificate, and is authorized by its grants; the default with TLS), or optional (a call without credentials runs unrestricted; the default with --insecure)")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", "", "HOST:PORT of an OTLP/gRPC trace receiver (an OpenTelemetry collector): spans of the message calls are exported there (docs/tracing.md); empty, the default, traces nothing")
	fs.BoolVar(&c.OTLPInsecure, "otlp-insecure", false, "export spans to --otlp-endpoint without TLS")
	fs.Float64Var(&c.TraceSample, "trace-sample", defaultTraceSample, "share (0..1) of message calls without a sampled parent that start a trace; calls from a tracing client follow its sampling decision")
	fs.BoolVar(&c.Insecure, "insecure", false, "run with no TLS and no gossip encryption: anyone who reaches a port can read every message and change the cluster (tests and throwaway clusters only)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: raftq-node [flags]\n\nRuns one node of a raftq cluster. Every flag may also be set as RAFTQ_<FLAG>,\ne.g. RAFTQ_NODE_ID=n1, RAFTQ_JOIN=127.0.0.1:7301.\n\n"+
			"Also: raftq-node probe (the container health check) and\n"+
			"raftq-node verify --data-dir DIR (checks a stopped node's data offline).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// Environment first, so the command line overrides it.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		key := "RAFTQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(key); v != "" {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("environment %s=%q: %w", key, v, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, flagHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	return c, c.finish()
}

func (c *config) finish() error {
	if c.NodeID == "" {
		return fmt.Errorf("--node-id is required (no hostname to default to)")
	}
	if c.DataDir == "" {
		c.DataDir = filepath.Join("data", c.NodeID)
	}
	if c.GRPCAdvertise == "" {
		c.GRPCAdvertise = c.GRPCBind
	}
	if err := c.checkTracing(); err != nil {
		return err
	}
	if c.PeerBind == "" {
		bind, err := offsetPort(c.GRPCBind, peerPortOffset)
		if err != nil {
			return fmt.Errorf("--peer-bind from --grpc-bind: %w", err)
		}
		c.PeerBind = bind
	}
	if c.PeerAdvertise == "" {
		adv, err := peerAdvertise(c.PeerBind, c.GRPCAdvertise)
		if err != nil {
			return err
		}
		c.PeerAdvertise = adv
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftBind
	}
	if c.GossipAdvertise == "" {
		c.GossipAdvertise = c.GossipBind
	}
	// In flag order, so the first flag to fix is named (the peer address
	// derives from the gRPC one).
	for _, a := range []struct{ name, addr string }{
		{"grpc-advertise", c.GRPCAdvertise}, {"peer-advertise", c.PeerAdvertise},
		{"raft-advertise", c.RaftAdvertise}, {"gossip-advertise", c.GossipAdvertise},
	} {
		if strings.HasPrefix(a.addr, "0.0.0.0:") || strings.HasPrefix(a.addr, "[::]:") || strings.HasPrefix(a.addr, ":") {
			return fmt.Errorf("--%s %q is not an address peers can dial; set it explicitly", a.name, a.addr)
		}
	}
	switch {
	case c.Shards > 256:
		return fmt.Errorf("--shards must be within 0..256 (0: one per --replication bootstrap voters), got %d", c.Shards)
	case c.Replication < 1 || c.Replication > 7:
		return fmt.Errorf("--replication must be within 1..7, got %d", c.Replication)
	case c.BootstrapExpect < 0 || c.BootstrapExpect > 7:
		return fmt.Errorf("--bootstrap-expect must be within 0..7, got %d", c.BootstrapExpect)
	case c.BootstrapExpect > 0 && c.BootstrapExpect < c.Replication:
		// A node with state ignores --bootstrap-expect: to raise
		// --replication past it, run such nodes with 0 (docs/operations.md).
		return fmt.Errorf("--bootstrap-expect %d is below --replication %d: shards could not be placed (a node that has joined a cluster may run --bootstrap-expect 0)", c.BootstrapExpect, c.Replication)
	case len(c.ClusterName) > cluster.MaxClusterNameLen:
		return fmt.Errorf("--cluster-name is %d bytes, at most %d", len(c.ClusterName), cluster.MaxClusterNameLen)
	case c.LogStore != raftgroup.LogStoreWAL && c.LogStore != raftgroup.LogStoreBolt:
		return fmt.Errorf("--log-store must be %s or %s, got %q", raftgroup.LogStoreWAL, raftgroup.LogStoreBolt, c.LogStore)
	case c.MaxClockOffset < time.Millisecond || c.MaxClockOffset > maxClockOffsetLimit:
		return fmt.Errorf("--max-clock-offset must be within 1ms..%v, got %v", maxClockOffsetLimit, c.MaxClockOffset)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("--shutdown-timeout must be positive")
	case c.DeadNodeGrace != 0 && c.DeadNodeGrace < minDeadNodeGrace:
		return fmt.Errorf("--dead-node-grace must be 0 (never replace) or at least %v, got %v", minDeadNodeGrace, c.DeadNodeGrace)
	case c.SnapshotInterval < 0:
		return fmt.Errorf("--snapshot-interval must not be negative")
	case c.RebalanceStable < 100*time.Millisecond || c.RebalanceStable > time.Hour:
		return fmt.Errorf("--rebalance-stable must be within 100ms..1h, got %v", c.RebalanceStable)
	case c.Restore != "" && c.BootstrapExpect == 0:
		return fmt.Errorf("--restore builds a new cluster: set --bootstrap-expect on every initial voter, each with --restore of the same backup")
	case c.Restore != "" && c.Repair:
		return fmt.Errorf("--restore and --repair do not go together: --restore builds a new cluster from empty data directories")
	}
	tlsGiven := c.TLSCA != "" || c.TLSCert != "" || c.TLSKey != "" || c.GossipKeyFile != ""
	switch {
	case c.Insecure && tlsGiven:
		return fmt.Errorf("--insecure and --tls-*/--gossip-key-file contradict each other: choose one")
	case !c.Insecure && (c.TLSCA == "" || c.TLSCert == "" || c.TLSKey == "" || c.GossipKeyFile == ""):
		return errNoSecurity
	case c.ClientAuth == "" && c.Insecure:
		c.ClientAuth = clientAuthOptional
	case c.ClientAuth == "":
		c.ClientAuth = clientAuthRequire
	case c.ClientAuth != clientAuthOptional && c.ClientAuth != clientAuthRequire:
		return fmt.Errorf("--client-auth must be %s or %s, got %q", clientAuthOptional, clientAuthRequire, c.ClientAuth)
	case c.ClientAuth == clientAuthRequire && c.Insecure:
		return fmt.Errorf("--client-auth require needs TLS: it cannot go with --insecure")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if err := checkLogFormat(c.LogFormat); err != nil {
		return err
	}
	if c.MetricsMaxQueues < 1 {
		return fmt.Errorf("--metrics-max-queues must be at least 1, got %d", c.MetricsMaxQueues)
	}
	if c.PprofBind != "" {
		if err := checkLoopback("pprof-bind", c.PprofBind); err != nil {
			return err
		}
	}
	if c.DiskStall < 0 {
		return fmt.Errorf("--disk-stall-timeout must not be negative (0 disables)")
	}
	if _, err := parseReserve(c.DiskReserve); err != nil {
		return err
	}
	if _, _, err := memoryBudget(c.MemoryBudget); err != nil {
		return err
	}
	if c.MaxParked < 0 {
		return fmt.Errorf("--max-parked-receives must not be negative (0: no cap)")
	}
	if c.MaxClientConns < 0 {
		return fmt.Errorf("--max-client-conns must not be negative (0: no cap), got %d", c.MaxClientConns)
	}
	if c.MaxStreamsPerConn != 0 && (c.MaxStreamsPerConn < minStreamsPerConn || c.MaxStreamsPerConn > maxStreamsPerConn) {
		return fmt.Errorf("--max-streams-per-conn must be 0 (no cap) or within %d..%d, got %d", minStreamsPerConn, maxStreamsPerConn, c.MaxStreamsPerConn)
	}
	if c.MaxRaftConns != 0 && c.MaxRaftConns < minRaftConns {
		return fmt.Errorf("--max-raft-conns must be 0 (no cap) or at least %d, got %d", minRaftConns, c.MaxRaftConns)
	}
	if c.RaftIdleTimeout != 0 && c.RaftIdleTimeout < raftmux.MinIdleTimeout {
		return fmt.Errorf("--raft-idle-timeout must be 0 (never) or at least %v, so the node that dialled a connection closes it first, between RPCs; got %v",
			raftmux.MinIdleTimeout, c.RaftIdleTimeout)
	}
	if n, err := parseSize(c.WALSegmentSize); err != nil || n < 1<<20 || n > 1<<30 {
		return fmt.Errorf("--wal-segment-size %q must be a size within 1MiB..1GiB", c.WALSegmentSize)
	}
	return nil
}

// diskSettings are the raft store settings the flags ask for; finish has
// checked them.
func (c *config) diskSettings() (stall time.Duration, reserve cluster.DiskReserve, segment int) {
	stall = c.DiskStall
	if stall == 0 {
		stall = -1 // disabled
	}
	reserve, _ = parseReserve(c.DiskReserve)
	seg, _ := parseSize(c.WALSegmentSize)
	return stall, reserve, int(seg)
}

// raftLimits are --max-raft-conns and --raft-idle-timeout as raftmux
// takes them: its zero values are its defaults, so "none" is negative.
func (c *config) raftLimits() (maxConns int, idle time.Duration) {
	maxConns, idle = c.MaxRaftConns, c.RaftIdleTimeout
	if maxConns == 0 {
		maxConns = -1
	}
	if idle == 0 {
		idle = -1
	}
	return maxConns, idle
}

func (c *config) joinList() []string { return splitList(c.Join) }

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
