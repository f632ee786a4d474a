// Command raftq-node runs one node of a raftq cluster: gossip membership,
// the meta raft group, the data shards placed on it, the gRPC API on one
// port and Prometheus metrics over HTTP.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/raftq/raftq/backup"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/internal/bufpool"
	"github.com/raftq/raftq/internal/liveness"
	"github.com/raftq/raftq/internal/version"
	"github.com/raftq/raftq/metrics"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/server"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/tlsconf"
	"github.com/raftq/raftq/wire"
)

func main() {
	// `raftq-node probe` is the container health check: images built FROM
	// scratch have no shell or curl, so the node binary probes itself.
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(runProbe(os.Args[2:]))
	}
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "raftq-node")
		return
	}
	// `raftq-node verify` checks a stopped node's data directory offline.
	if len(os.Args) > 1 && os.Args[1] == "verify" {
		os.Exit(runVerify(os.Args[2:]))
	}
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flagHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "raftq-node: %v\n", err)
		os.Exit(2)
	}
	privateFiles()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "raftq-node: %v\n", err)
		os.Exit(1)
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// peerMaxRequest caps one request on the peer port.
const peerMaxRequest = 64 << 20

// run serves until ctx ends, then shuts down in order: refuse new calls,
// drain in-flight ones, hand off leadership, close raft.
func run(ctx context.Context, cfg *config, logOut io.Writer) error {
	level, _ := parseLevel(cfg.LogLevel)
	// cluster.Start tags its own lines (and its shards') with the node; the
	// rest of this binary's lines get the tag here, so no line has it twice.
	handler, stopping := newStopLog(logHandler(cfg.LogFormat, logOut, level))
	base := slog.New(handler)
	log := base.With("node", cfg.NodeID)

	hup, stopHup := catchHangup()
	defer stopHup()
	sec, err := cfg.loadSecurity()
	if err != nil {
		return err
	}
	if sec.tls != nil {
		warnExpiry(log, sec.tls.NotAfter(), time.Now())
		if cfg.ClientAuth == clientAuthOptional {
			log.Warn("--client-auth optional: a client call without an API key or certificate runs unrestricted (docs/security.md)")
		}
	} else {
		log.Warn("INSECURE: --insecure given: no TLS, no gossip encryption; anyone who reaches this node's ports can read every message, " +
			"join raft and change the cluster (docs/security.md)")
	}
	tracing, err := startTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	// On the error paths; a clean stop flushes within --shutdown-timeout
	// below, and this call then does nothing.
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		_ = tracing.shutdown(fctx, log)
	}()
	lis, err := net.Listen("tcp", cfg.GRPCBind)
	if err != nil {
		return fmt.Errorf("listen gRPC %s: %w", cfg.GRPCBind, err)
	}
	plis, err := net.Listen("tcp", cfg.PeerBind)
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("listen peer %s: %w", cfg.PeerBind, err)
	}
	var pprofLis net.Listener
	if cfg.PprofBind != "" {
		if pprofLis, err = net.Listen("tcp", cfg.PprofBind); err != nil {
			_ = lis.Close()
			_ = plis.Close()
			return fmt.Errorf("listen pprof %s: %w", cfg.PprofBind, err)
		}
		defer pprofLis.Close()
	}
	now := time.Now
	if cfg.ClockOffset != 0 {
		log.Warn("clock offset set: this node's time is skewed (testing only)", "offset", cfg.ClockOffset)
		off := cfg.ClockOffset
		now = func() time.Time { return time.Now().Add(off) }
	}
	// fatal carries the reason a node must stop (a damaged meta replica, a
	// node that lost its state); run returns it and the process exits 1.
	fatal := make(chan error, 1)
	stall, reserve, segment := cfg.diskSettings()
	budget, budgetFrom, _ := memoryBudget(cfg.MemoryBudget)
	if budget > 0 {
		// The collector works harder as the heap nears the limit, so the
		// process holds the live heap the memory guard watches
		// (cluster/memguard.go) and not much garbage besides. A tenth of
		// the budget is left for what the Go runtime does not count
		// (memory the kernel has not yet taken back, C libraries).
		debug.SetMemoryLimit(int64(min(budget/10*9, math.MaxInt64)))
		log.Info("memory budget", "budget", shard.FormatBytes(budget), "from", budgetFrom, "refuse_sends_above", shard.FormatBytes(budget*6/10))
	} else {
		log.Warn("no memory budget: sends are never refused for memory (--memory-budget)", "from", budgetFrom)
	}
	var restore *backup.Source
	if cfg.Restore != "" {
		// Verified whole before anything starts: a damaged backup must
		// never seed a replica.
		if restore, err = backup.Open(cfg.Restore); err != nil {
			_ = lis.Close()
			_ = plis.Close()
			return fmt.Errorf("--restore: %w", err)
		}
		log.Info("restoring from backup", "dir", cfg.Restore, "backup_cluster", restore.Manifest.ClusterID,
			"created", restore.Manifest.CreatedAt, "shards", restore.ShardCount())
	}
	raftMaxConns, raftIdle := cfg.raftLimits()
	node, err := cluster.Start(ctx, cluster.Config{
		NodeID: cfg.NodeID, DataDir: cfg.DataDir, GRPCAddr: cfg.GRPCAdvertise, PeerAddr: cfg.PeerAdvertise,
		RaftBind: cfg.RaftBind, RaftAdvertise: cfg.RaftAdvertise, RaftMaxConns: raftMaxConns, RaftIdleTimeout: raftIdle,
		GossipBind: cfg.GossipBind, GossipAdvertise: cfg.GossipAdvertise,
		Join: cfg.joinList(), ClusterName: cfg.ClusterName, BootstrapExpect: cfg.BootstrapExpect,
		Shards: uint32(cfg.Shards), Replication: cfg.Replication, Now: now, MaxClockOffset: cfg.MaxClockOffset, Logger: base,
		Raft: raftgroup.RaftTuning{LogStore: cfg.LogStore, WALSegmentBytes: segment,
			SnapshotThreshold: cfg.SnapshotThreshold, SnapshotInterval: cfg.SnapshotInterval},
		Disk:         raftgroup.DiskOptions{StallAfter: stall, OnFatal: func(err error) { diskFatal(log, err) }},
		DiskReserve:  reserve,
		MemoryBudget: budget,
		Repair:       cfg.Repair,
		DeadNodeGrace: func() time.Duration {
			if cfg.DeadNodeGrace == 0 {
				return -1 // disabled
			}
			return cfg.DeadNodeGrace
		}(),
		DisableRebalance: !cfg.Rebalance, RebalanceStable: cfg.RebalanceStable,
		Restore: restore,
		TLS:     sec.tls, GossipKeys: sec.gossipKeys,
		Fatal: func(err error) {
			select {
			case fatal <- err:
			default:
			}
		},
	})
	if err != nil {
		_ = lis.Close()
		_ = plis.Close()
		return fmt.Errorf("start cluster node: %w", err)
	}
	met := metrics.New(node, metrics.WithMaxQueueLabels(cfg.MetricsMaxQueues))
	met.SetBuildInfo(version.Get())
	if cfg.RaftMetrics {
		if err := installRaftMetrics(met.Registerer()); err != nil {
			return err
		}
	}
	if sec.tls != nil {
		met.WatchCertificate(sec.tls.NotAfter)
	}
	ropts := router.Options{Logger: log, ObservePropose: met.ObservePropose, Parked: met.ReceiveParked, MaxParked: cfg.MaxParked}
	if sec.tls != nil {
		ropts.PeerCreds = sec.tls.PeerCredentials()
	}
	rt := router.New(node, ropts)
	defer rt.Close()
	node.SetShardCaller(rt)
	// Peers and clients ping connections with calls in flight every 10 s
	// (internal/liveness); without the policy the server would close them.
	newServer := func(maxRequest int, opts ...grpc.ServerOption) *grpc.Server {
		return grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(met.UnaryInterceptor()),
			grpc.MaxRecvMsgSize(maxRequest), bufpool.ServerOption(), liveness.KeepaliveServerOption()}, opts...)...)
	}
	// Clients and nodes get listeners of their own: the node-to-node
	// service is never served on the client port, so the peer port can be
	// kept to cluster members. A client request is at most
	// wire.MaxRequestBytes: gRPC refuses a larger one before reading it
	// into memory. Peer requests may be larger: a slot move hands the new
	// shard every live FIFO group of the slots in one request
	// (docs/resharding.md).
	srv := server.New(node, rt, met, log)
	// Administrative calls leave an audit record each, refused ones
	// included (docs/security.md, "Audit log"); then every call is
	// authenticated and authorized ("API keys and roles") before any
	// handler runs.
	access, accessStream := srv.Access(cfg.ClientAuth == clientAuthRequire)
	audit := server.NewAudit(log, cfg.NodeID, srv.StoreAudit, srv.Caller)
	// The connection limit comes first: a call it refuses costs no
	// authentication and leaves no audit record (a record is a meta raft
	// write, which a client past the limit must not be able to cause).
	// The tap refuses a send for a queue this node has just refused,
	// before its body is read (server/admission.go).
	clientLim := newClientLimiter(cfg, met, log)
	clientOpts := append(clientLimits(clientLim, cfg.MaxStreamsPerConn),
		grpc.ChainUnaryInterceptor(audit.Unary(), access), grpc.ChainStreamInterceptor(audit.Stream(), accessStream),
		grpc.InTapHandle(srv.Tap))
	clientOpts = append(clientOpts, tracing.serverOptions()...)
	peerOpts := peerLimits()
	// refused answers plaintext clients of a TLS client port (plaintext.go).
	var refused *grpc.Server
	if sec.tls != nil {
		clientOpts = append(clientOpts, grpc.Creds(credentials.NewTLS(sec.tls.ClientPort())))
		peerOpts = append(peerOpts, grpc.Creds(credentials.NewTLS(sec.tls.Members(tlsconf.ALPNGRPC))))
		refused = refusePlaintext()
	}
	gs := newServer(wire.MaxRequestBytes, clientOpts...)
	ps := newServer(peerMaxRequest, peerOpts...)
	if sec.tls != nil {
		// Receipts are signed with keys derived from the gossip keys
		// (server/receipts.go): every member holds them, and they rotate
		// with them.
		rk, err := server.NewReceiptKeys(sec.gossipKeys)
		if err != nil {
			return err
		}
		srv.SetReceiptKeys(rk)
	}
	srv.Register(gs)
	srv.Peer().Register(ps)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	// Forwarding nodes probe the peer connection's liveness with health
	// checks (internal/liveness).
	healthpb.RegisterHealthServer(ps, hs)
	reflection.Register(gs)

	serveErr := make(chan error, 2)
	// Every connection counts toward the ceiling, those refused as
	// plaintext and those still in their TLS handshake included.
	lis = clientLim.Listener(lis)
	if refused != nil {
		tlsLis, plainLis := splitTLS(lis)
		lis = tlsLis
		go func() { _ = refused.Serve(plainLis) }()
		defer refused.Stop()
	}
	reloadOnHangup(ctx, hup, sec, cfg, node, srv, log)
	go func() { serveErr <- gs.Serve(lis) }()
	go func() { serveErr <- ps.Serve(plis) }()
	var stopHTTP func(context.Context) error
	if cfg.HTTPBind != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", met.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if node.Retired() {
				http.Error(w, "retired: this node's id was removed from the cluster", http.StatusServiceUnavailable)
				return
			}
			select {
			case <-node.Ready():
				_, _ = io.WriteString(w, "ok\n")
			default:
				http.Error(w, "forming", http.StatusServiceUnavailable)
			}
		})
		// The web console shares the port (console.go).
		stopHTTP = serveHTTP(ctx, cfg, sec, mux, met.Handler(), log)
	}
	if pprofLis != nil {
		psrv := pprofServer()
		defer psrv.Close()
		go func() {
			if err := psrv.Serve(pprofLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("pprof server stopped", "err", err)
			}
		}()
		log.Info("serving profiles", "pprof", cfg.PprofBind)
	}
	log.Info("raftq-node started", "grpc", cfg.GRPCAdvertise, "peer", cfg.PeerAdvertise, "raft", cfg.RaftAdvertise, "gossip", cfg.GossipAdvertise,
		"http", cfg.HTTPBind, "data", cfg.DataDir, "join", strings.Join(cfg.joinList(), ","), "bootstrap_expect", cfg.BootstrapExpect)

	var stopErr error
	select {
	case <-node.Ready():
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		log.Info("cluster ready: shards open, serving")
	case <-ctx.Done():
	case stopErr = <-fatal:
	case err := <-serveErr:
		return fmt.Errorf("gRPC server: %w", err)
	}
	if stopErr == nil {
		select {
		case <-ctx.Done():
		case stopErr = <-fatal:
		case err := <-serveErr:
			return fmt.Errorf("gRPC server: %w", err)
		}
	}
	if stopErr != nil {
		log.Error("stopping", "err", stopErr)
	}

	stopping.Store(true)
	log.Info("stopping: draining calls, handing off leadership")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	hs.Shutdown()
	drained := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, s := range []*grpc.Server{gs, ps} {
			wg.Add(1)
			go func() { defer wg.Done(); s.GracefulStop() }()
		}
		wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(cfg.ShutdownTimeout / 2):
		// Long polls may still be parked; they lease nothing while waiting,
		// so cutting them is safe.
		gs.Stop()
		ps.Stop()
		<-drained
	}
	if stopHTTP != nil {
		_ = stopHTTP(sctx)
	}
	// raft's Shutdown waits for an in-progress snapshot to be persisted,
	// which can outlast any deadline with a large backlog. Exiting then is
	// safe: the log is fsync'd and a partial snapshot is discarded.
	shut := make(chan error, 1)
	go func() { shut <- node.Shutdown(sctx) }()
	select {
	case err := <-shut:
		if err != nil {
			return fmt.Errorf("node shutdown: %w", err)
		}
	case <-sctx.Done():
		return fmt.Errorf("node shutdown did not finish within %v; exiting anyway (the raft log on disk is durable)", cfg.ShutdownTimeout)
	}
	// Spans of the drained calls leave last, within what is left of the
	// shutdown timeout.
	_ = tracing.shutdown(sctx, log)
	if stopErr != nil {
		return stopErr
	}
	log.Info("stopped")
	return nil
}

// diskFatal stops the process after a raft store write failed with
// anything but lack of space (raftgroup.DiskOptions.OnFatal). It exits at once,
// from the failing write: the node must not go on (a failed fsync may have
// lost data the kernel said was written, and retrying it could report
// success for nothing), and what the failed write held was never
// acknowledged. On restart every raft group recovers from its log on disk.
func diskFatal(log *slog.Logger, err error) {
	attrs := []any{"err", err}
	var de *raftgroup.DiskError
	if errors.As(err, &de) {
		attrs = append(attrs, "group", de.Group, "op", de.Op, "dir", de.Dir, "cause", de.Err)
	}
	log.Error("FATAL: raft store write failed; stopping the node. Check the disk holding dir (kernel log, SMART, mount state) "+
		"and restart the node once it is sound: it recovers from its raft log (what the failed write held was never acknowledged)", attrs...)
	os.Exit(1)
}
