package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/jepsen-lite/checker"
	"github.com/raftq/raftq/jepsen-lite/history"
	"github.com/raftq/raftq/jepsen-lite/nemesis"
	"github.com/raftq/raftq/jepsen-lite/netns"
	"github.com/raftq/raftq/jepsen-lite/nodes"
	"github.com/raftq/raftq/jepsen-lite/workload"
)

func logf(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// runAll sets up the network and cluster, runs the workloads under the
// nemesis, runs the final phase, checks and reports. ok is the verdict;
// err means the run itself could not be carried out.
func runAll(ctx context.Context, o *options) (ok bool, err error) {
	var wls []*workload.Workload
	fifo := map[string]bool{}
	for _, name := range o.workloads {
		w, err := workload.ByName(name)
		if err != nil {
			return false, err
		}
		wls = append(wls, w)
		for _, q := range w.Queues {
			if q.FIFO {
				fifo[q.Name] = true
			}
		}
	}
	if len(wls) == 0 {
		return false, fmt.Errorf("no workload")
	}
	cleanup := context.WithoutCancel(ctx)
	if o.backend == "local" {
		if err := netns.Require(); err != nil {
			return false, err
		}
		if swept, err := netns.Sweep(cleanup); err != nil {
			return false, err
		} else if len(swept) > 0 {
			logf("removed networks left by dead runs: %v", swept)
		}
	}
	dir := filepath.Join(o.runsDir, fmt.Sprintf("%s-%d", time.Now().Format("20060102-150405"), o.seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("run dir: %w", err)
	}
	// Registered before teardown, so it runs after the nodes are gone.
	defer func() { retainRun(dir, ok && err == nil, o.keepAll) }()
	logf("jepsen-lite seed %d backend %s workloads %v nemesis %v time %v -> %s", o.seed, o.backend, o.workloads, o.nemeses, o.duration, dir)
	logf("replay: go run ./jepsen-lite --backend %s --workload %s --nemesis %s --time %v --seed %d --nodes %d --spares %d --shards %d",
		o.backend, join(o.workloads), join(o.nemeses), o.duration, o.seed, o.nodes, o.spares, o.shards)

	var (
		cl       cluster
		nw       nemesis.Network
		teardown func()
	)
	if o.backend == "compose" {
		cl, nw, teardown, err = setupCompose(ctx, o, dir)
	} else {
		cl, nw, teardown, err = setupLocal(ctx, o, dir)
	}
	if teardown != nil {
		defer teardown()
	}
	if err != nil {
		return false, err
	}
	hctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	err = cl.WaitHealthy(hctx)
	cancel()
	if err != nil {
		return false, fmt.Errorf("cluster did not come up: %w", err)
	}
	logf("cluster up: %d nodes (%d spare slots), %d shards", len(cl.Members()), cl.Size()-len(cl.Members()), o.shards)

	rec, err := history.NewRecorder(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return false, err
	}
	defer rec.Close()
	// Clients follow membership as the harness sees it: a new node once
	// it is started, never a retired one's slot (its calls then fail or
	// time out, as they would for a client that has not heard yet).
	env := &workload.Env{Rec: rec, CallTimeout: 3 * time.Second, Members: cl.Members}
	for i := range cl.Size() {
		env.Conns = append(env.Conns, cl.Conn(i))
		env.Addrs = append(env.Addrs, cl.Addr(i))
	}
	var vis time.Duration
	setup := &history.Setup{Nemesis: o.nemeses, Nodes: o.nodes, Shards: o.shards, Replication: min(3, o.nodes),
		// docker/compose.yaml leaves --max-clock-offset at the nodes'
		// default, which nodes.MaxClockOffset is too.
		ClockBoundMs: nodes.MaxClockOffset.Milliseconds(),
		// The nodes run on this host's clock (give or take the clock
		// nemesis's offsets, which the clock bound keeps from leading):
		// the quota checker places lease deadlines on it.
		StartUnixMs: rec.Start().UnixMilli()}
	for _, w := range wls {
		vis = max(vis, w.Visibility)
		// Tenants first: a tenant's queue is refused until it exists.
		for _, t := range w.Tenants {
			if err := createTenant(ctx, env.MemberConns(), t); err != nil {
				return false, err
			}
			setup.Tenants = append(setup.Tenants, history.TenantSetup{Name: t.Name,
				MaxMessages: t.Quotas.GetMaxMessages(), MaxInFlight: t.Quotas.GetMaxInFlight()})
		}
		for _, q := range w.Queues {
			if err := createQueue(ctx, env.MemberConns(), q); err != nil {
				return false, err
			}
			setup.Queues = append(setup.Queues, history.QueueSetup{Name: q.Name, FIFO: q.FIFO,
				VisibilityMs: q.Policy.GetVisibilityTimeoutMs(), MaxReceives: q.Policy.GetMaxReceiveCount()})
		}
	}
	nem, err := nemesis.New(nw, cl, rec, o.nemeses, vis, o.seed)
	if err != nil {
		return false, err
	}
	nem.Log = logf
	nem.MaxShards = nemesis.ReshardCap(o.shards, o.nodes)
	// Every kind fires in every run: the first len(kinds) draws are each
	// kind once. Only a run too short for the schedule can miss one, and
	// the checker then calls it INVALID.
	if cover := nem.CoverWithin(); o.duration < cover {
		logf("WARNING: --time %v is shorter than the %v the schedule may take to start every kind (%d kinds); a kind that never fires makes the run INVALID", o.duration, cover, len(o.nemeses))
	} else if cover > 0 {
		logf("schedule: every kind starts within %v of gaps and holds, plus the time faults take to apply and undo", cover)
	}
	rec.Add(history.Op{Type: history.Info, F: history.FPhase, Process: history.NemesisProcess, Fault: history.PhaseSetup, Setup: setup})

	start := time.Now()
	rctx, rcancel := context.WithTimeout(ctx, o.duration)
	var wg sync.WaitGroup
	for k, w := range wls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Run(rctx, env, o.seed*1000+uint64(k)*100)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Not rctx: a fault under way when the clients stop is applied
		// and undone in full.
		nem.Run(ctx, o.duration)
	}()
	wg.Wait()
	rcancel()
	if ctx.Err() != nil {
		return false, fmt.Errorf("interrupted")
	}
	logf("workload and faults done after %v: %d history entries", time.Since(start).Round(time.Millisecond), len(rec.Ops()))

	// A final phase that fails is a verdict (INVALID: nothing after the
	// failure was checked), not a harness error.
	fin, ferr := finalPhase(ctx, cl, nem, env, wls, vis)
	if ctx.Err() != nil {
		return false, fmt.Errorf("interrupted")
	}
	if ferr != nil {
		logf("final phase failed: %v", ferr)
		rec.Add(history.Op{Type: history.Fail, F: history.FPhase, Process: history.NemesisProcess, Fault: history.PhaseFinal, Error: ferr.Error()})
	} else {
		rec.Add(history.Op{Type: history.OK, F: history.FPhase, Process: history.NemesisProcess, Fault: history.PhaseFinal})
	}
	if err := rec.Close(); err != nil {
		return false, err
	}
	results := checker.Check(rec.Ops(), checker.Options{FIFOQueues: fifo})
	rep := newReport(o, dir, rec.Ops(), nem.Counts(), results, fin)
	if err := rep.write(dir); err != nil {
		return false, err
	}
	fmt.Print(rep.text())
	return rep.Valid, nil
}

// setupLocal builds the node binary, creates the namespaces and starts
// the nodes. teardown (set even on error once something exists) kills the
// nodes and deletes the network.
func setupLocal(ctx context.Context, o *options, dir string) (cluster, nemesis.Network, func(), error) {
	cleanup := context.WithoutCancel(ctx)
	bin := o.bin
	if bin == "" {
		var err error
		if bin, err = testcluster.Build(ctx, dir); err != nil {
			return nil, nil, nil, err
		}
	}
	nw, err := netns.Create(ctx, o.nodes+o.spares)
	if err != nil {
		return nil, nil, nil, err
	}
	destroy := func() {
		if derr := nw.Destroy(cleanup); derr != nil {
			logf("cleanup network: %v", derr)
		}
	}
	logf("network %s: hub namespace %s, %s.0/24", nw.ID, nw.Hub, nw.Subnet)
	cl, err := nodes.New(bin, dir, nw, o.shards, o.nodes)
	if err != nil {
		return nil, nil, destroy, err
	}
	teardown := func() {
		cl.KillAll(cleanup)
		destroy()
	}
	for _, i := range cl.Members() {
		if err := cl.Start(i, 0); err != nil {
			return nil, nil, teardown, err
		}
	}
	return cl, nw, teardown, nil
}

func join(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	out := s[0]
	for _, x := range s[1:] {
		out += "," + x
	}
	return out
}

// createQueue creates q through any node, retrying while the control plane
// settles. Creating it again with the same policy succeeds.
func createQueue(ctx context.Context, conns []*grpc.ClientConn, q workload.Queue) error {
	err := retryCreate(ctx, conns, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := raftqv1.NewQueuesClient(cc).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: q.Name, Policy: q.Policy})
		return err
	})
	if err != nil {
		return fmt.Errorf("create queue %s: %w", q.Name, err)
	}
	return nil
}

// createTenant creates t through any node, retrying while the control
// plane settles. Creating it again with the same quotas succeeds.
func createTenant(ctx context.Context, conns []*grpc.ClientConn, t workload.Tenant) error {
	err := retryCreate(ctx, conns, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := raftqv1.NewTenantsClient(cc).CreateTenant(ctx, &raftqv1.CreateTenantRequest{Name: t.Name, Quotas: t.Quotas})
		return err
	})
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", t.Name, err)
	}
	return nil
}

// retryCreate runs create through each node in turn until it succeeds, up
// to 50 attempts 200 ms apart, and returns the last error.
func retryCreate(ctx context.Context, conns []*grpc.ClientConn, create func(ctx context.Context, cc *grpc.ClientConn) error) error {
	var last error
	for attempt := range 50 {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		last = create(cctx, conns[attempt%len(conns)])
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return last
}
