package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/history"
	"github.com/raftq/raftq/jepsen-lite/nemesis"
	"github.com/raftq/raftq/jepsen-lite/workload"
	"github.com/raftq/raftq/peer/peerpb"
)

// drainVis is the lease the drain asks for: short, so a drain ack whose
// outcome is unknown cannot hide a message for long.
const drainVis = 3 * time.Second

// finalInfo is what the final phase found, for report.json and the
// summary. The verdict does not read it: everything it judges is in the
// history too (phase ops, final and dead records), so --check re-judges a
// saved run the same way.
type finalInfo struct {
	Drained  int                     `json:"drained"`
	Dead     int                     `json:"dead"`
	Records  int                     `json:"records"`
	Missing  []string                `json:"missing_records,omitempty"`
	Replicas []history.ShardReplicas `json:"replicas"`
	// Converged: every replica of every shard at one applied index.
	Converged bool   `json:"replicas_converged"`
	Error     string `json:"error,omitempty"`
}

// finalPhase heals every fault, waits past the lease, drains every queue
// through every node (again once the slot moves a growth left running are
// done), lists every DLQ, fetches the server's record of every message
// the history names, and compares replicas. An error means it could not
// finish; fin holds what it found until then.
func finalPhase(ctx context.Context, cl cluster, nem *nemesis.Nemesis, env *workload.Env, wls []*workload.Workload, vis time.Duration) (fin *finalInfo, err error) {
	fin = &finalInfo{}
	defer func() {
		if err != nil {
			fin.Error = err.Error()
		}
	}()
	env.Rec.Add(history.Op{Type: history.Info, F: history.FPhase, Process: history.NemesisProcess, Fault: history.PhaseHeal})
	if err := nem.HealAll(ctx); err != nil {
		return fin, fmt.Errorf("heal: %w", err)
	}
	hctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err = cl.WaitHealthy(hctx)
	cancel()
	if err != nil {
		return fin, fmt.Errorf("cluster did not heal: %w", err)
	}
	// Leases granted before the heal (and the leader-change grace) must run
	// out so their messages can be drained.
	wait := 2*vis + 2*time.Second
	logf("healed; waiting %v past the visibility timeout", wait)
	if !sleepCtx(ctx, wait) {
		return fin, ctx.Err()
	}
	env.Rec.Add(history.Op{Type: history.Info, F: history.FPhase, Process: history.NemesisProcess, Fault: history.PhaseDrain})
	if err := drainAll(ctx, env, wls, fin); err != nil {
		return fin, err
	}
	// A slot move the run's end left in route finishes once the drain
	// consumed its held groups on the old shard; the new shard held
	// their newer messages until then, so the drain runs again.
	waited, err := nem.AwaitSlotMoves(ctx)
	if err != nil {
		return fin, err
	}
	if waited {
		logf("slot moves done after the drain; draining again")
		if err := drainAll(ctx, env, wls, fin); err != nil {
			return fin, err
		}
	}
	for _, w := range wls {
		for _, q := range w.DrainQueues() {
			d, err := listDead(ctx, env, q)
			if err != nil {
				return fin, err
			}
			fin.Dead += d
		}
	}
	logf("drained %d messages, %d in DLQs", fin.Drained, fin.Dead)
	fin.Records, fin.Missing = fetchRecords(ctx, env)
	logf("fetched %d server records (%d unavailable)", fin.Records, len(fin.Missing))
	fin.Replicas, fin.Converged = compareReplicas(ctx, cl)
	compareDigests(ctx, cl, fin.Replicas)
	env.Rec.Add(history.Op{Type: history.OK, F: history.FPhase, Process: history.NemesisProcess, Fault: history.PhaseReplicas, Shards: fin.Replicas})
	return fin, nil
}

// compareDigests asks every replica of every shard for its FSM digest
// (Peer.ShardDigest), until all of a shard's digests are at one applied
// index (bounded): digests at different indexes compare nothing. The
// checker judges them (checker/final.go).
func compareDigests(ctx context.Context, cl cluster, shards []history.ShardReplicas) {
	for k := range shards {
		rs := &shards[k]
		deadline := time.Now().Add(20 * time.Second)
		for {
			rs.Digests, rs.Errors = map[string]string{}, nil
			indexes := map[uint64]bool{}
			for _, node := range rs.Replicas {
				i := cl.Index(node)
				if i < 0 {
					rs.Errors = append(rs.Errors, fmt.Sprintf("%s: not a node of this cluster", node))
					continue
				}
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := peerpb.NewPeerClient(cl.PeerConn(i)).ShardDigest(cctx, &peerpb.ShardDigestRequest{ShardId: rs.Shard})
				cancel()
				if err != nil {
					rs.Errors = append(rs.Errors, fmt.Sprintf("%s: %v", node, err))
					continue
				}
				rs.Digests[node] = fmt.Sprintf("%d:%s", resp.GetAppliedIndex(), hex.EncodeToString(resp.GetDigest()))
				indexes[resp.GetAppliedIndex()] = true
			}
			if len(rs.Errors) == 0 && len(indexes) == 1 || time.Now().After(deadline) || !sleepCtx(ctx, 500*time.Millisecond) {
				break
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// drainAll drains every workload's queues (drain), adding to fin.Drained.
func drainAll(ctx context.Context, env *workload.Env, wls []*workload.Workload, fin *finalInfo) error {
	for _, w := range wls {
		for _, q := range w.DrainQueues() {
			n, err := drain(ctx, env, q)
			if err != nil {
				return err
			}
			fin.Drained += n
		}
	}
	return nil
}

// drain receives and acks through each node in turn until every node has
// answered empty for longer than a drain lease, twice round.
func drain(ctx context.Context, env *workload.Env, queue string) (int, error) {
	c := env.NewClient(0)
	total := 0
	emptySince := time.Time{}
	rounds := 0
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		gotAny, allOK := false, true
		for _, i := range env.Nodes() {
			c.Pin(i)
			op, ds := c.Receive(ctx, queue, 100, 300*time.Millisecond, drainVis)
			if op.Type != history.OK {
				allOK = false
				continue
			}
			gotAny = gotAny || len(ds) > 0
			total += ackAll(ctx, env, ds)
		}
		if gotAny || !allOK {
			emptySince, rounds = time.Time{}, 0
			continue
		}
		if emptySince.IsZero() {
			emptySince = time.Now()
		}
		rounds++
		if rounds >= 2 && time.Since(emptySince) > drainVis+time.Second {
			return total, nil
		}
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
	return total, fmt.Errorf("queue %s did not drain within 3 minutes", queue)
}

// ackAll acks ds with up to 16 clients at once (each its own process, one
// ack at a time) and returns how many succeeded.
func ackAll(ctx context.Context, env *workload.Env, ds []history.Delivery) int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	ok := 0
	work := make(chan history.Delivery)
	for range min(16, len(ds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := env.NewClient(0)
			for d := range work {
				if a := c.Ack(ctx, d); a.Type == history.OK {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		}()
	}
	for _, d := range ds {
		work <- d
	}
	close(work)
	wg.Wait()
	return ok
}

// listDead records every DLQ entry of queue, asking every node (each
// gathers over the shards) for every page and keeping the union.
func listDead(ctx context.Context, env *workload.Env, queue string) (int, error) {
	seen := map[string]bool{}
	var last error
	answered := 0
	for _, i := range env.Nodes() {
		ok := true
		// Bounded: a page holds up to 1000 entries, and no run
		// dead-letters a hundred thousand messages.
		token := ""
		for range 100 {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := raftqv1.NewDeadLettersClient(env.Conns[i]).ListDead(cctx, &raftqv1.ListDeadRequest{Queue: queue, Limit: 1000, PageToken: token})
			cancel()
			if err != nil {
				last, ok = fmt.Errorf("list dead %s via %s: %w", queue, env.Addrs[i], err), false
				break
			}
			for _, m := range resp.GetMessages() {
				if seen[m.GetMessageId()] {
					continue
				}
				seen[m.GetMessageId()] = true
				env.Rec.Add(history.Op{Type: history.OK, F: history.FDead, Process: history.NemesisProcess, Node: env.Addrs[i],
					Queue: queue, MessageID: m.GetMessageId(), Value: string(m.GetMessage().GetBody()), Final: record(m.GetMessage())})
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		if ok {
			answered++
		}
	}
	if answered == 0 {
		return 0, last
	}
	return len(seen), nil
}

// fetchRecords asks for the server's record of every message id in the
// history, retrying over nodes, and records each as a final operation.
func fetchRecords(ctx context.Context, env *workload.Env) (int, []string) {
	ids := map[string]bool{}
	for _, op := range env.Rec.Ops() {
		if op.F == history.FEnqueue && op.Type == history.OK && op.MessageID != "" {
			ids[op.MessageID] = true
		}
		for _, d := range op.Deliveries {
			ids[d.MessageID] = true
		}
		if op.F == history.FDead {
			ids[op.MessageID] = true
		}
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	// Each id is asked on its own, so the asks run fetchWorkers at a time:
	// one after another they took minutes of the smoke's budget once the
	// shards had gone quiet (a quiet leader's read waits for a heartbeat
	// round). The results are recorded in id order, as before.
	type answer struct {
		got  *raftqv1.MessageInfo
		last error
	}
	answers := make([]answer, len(sorted))
	next := make(chan int)
	var wg sync.WaitGroup
	for range fetchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				answers[i].got, answers[i].last = fetchRecord(ctx, env, sorted[i])
			}
		}()
	}
	for i := range sorted {
		next <- i
	}
	close(next)
	wg.Wait()
	n := 0
	var missing []string
	for i, id := range sorted {
		got, last := answers[i].got, answers[i].last
		if got == nil {
			missing = append(missing, fmt.Sprintf("%s: %v", id, last))
			continue
		}
		n++
		env.Rec.Add(history.Op{Type: history.OK, F: history.FFinal, Process: history.NemesisProcess, MessageID: id, Final: record(got.GetMessage())})
	}
	return n, missing
}

// fetchWorkers is how many record asks run at once in the final phase.
const fetchWorkers = 8

// fetchRecord asks for one message's record, retrying over the members.
func fetchRecord(ctx context.Context, env *workload.Env, id string) (*raftqv1.MessageInfo, error) {
	var got *raftqv1.MessageInfo
	var last error
	conns := env.MemberConns()
	for attempt := 0; attempt < 3*len(conns) && got == nil; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		got, last = raftqv1.NewMessagesClient(conns[attempt%len(conns)]).GetMessage(cctx, &raftqv1.GetMessageRequest{MessageId: id})
		cancel()
		if got == nil && !sleepCtx(ctx, 50*time.Millisecond) {
			break
		}
	}
	return got, last
}

func record(m *raftqv1.Message) *history.Record {
	if m == nil {
		return nil
	}
	r := &history.Record{
		State: trim(m.GetState().String(), "STATE_"), Value: string(m.GetBody()), Group: m.GetGroupId(), DedupKey: m.GetDedupKey(),
		LeaseEpoch: m.GetLeaseEpoch(), LeaseDeadMs: m.GetLeaseDeadlineMs(), ReceiveCount: m.GetReceiveCount(), Seq: m.GetSeq(),
	}
	if m.GetState() == raftqv1.State_STATE_DEAD {
		r.DeadReason = trim(m.GetDeadReason().String(), "REASON_")
	}
	for _, a := range m.GetHistory() {
		r.Attempts = append(r.Attempts, history.Attempt{Epoch: a.GetLeaseEpoch(), ReceivedMs: a.GetReceivedMs(), EndedMs: a.GetEndedMs(),
			Outcome: trim(a.GetOutcome().String(), "REASON_"), Consumer: a.GetConsumer()})
	}
	return r
}

func trim(s, prefix string) string {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// compareReplicas polls Cluster.Status on every node until, for every
// shard, every replica the nodes list reports the same applied index
// (bounded wait).
func compareReplicas(ctx context.Context, cl cluster) ([]history.ShardReplicas, bool) {
	var states []history.ShardReplicas
	deadline := time.Now().Add(20 * time.Second)
	for {
		byShard := map[uint32]*history.ShardReplicas{}
		for _, i := range cl.Members() {
			id := cl.NodeID(i)
			st, err := cl.Status(ctx, i)
			if err != nil {
				continue
			}
			for _, s := range st.GetShards() {
				rs := byShard[s.GetShardId()]
				if rs == nil {
					rs = &history.ShardReplicas{Shard: s.GetShardId(), Applied: map[string]uint64{}, Commit: map[string]uint64{}}
					byShard[s.GetShardId()] = rs
				}
				for _, r := range s.GetReplicas() {
					if !slices.Contains(rs.Replicas, r) {
						rs.Replicas = append(rs.Replicas, r)
					}
				}
				// Only a replica knows its shard's leader (nodes/nodes.go).
				if slices.Contains(s.GetReplicas(), id) && rs.Leader == "" {
					rs.Leader = s.GetLeaderId()
				}
				if s.GetAppliedIndex() > 0 {
					rs.Applied[id] = s.GetAppliedIndex()
					rs.Commit[id] = s.GetCommitIndex()
				}
			}
		}
		states = states[:0]
		converged := len(byShard) > 0
		for _, rs := range byShard {
			slices.Sort(rs.Replicas)
			states = append(states, *rs)
			var first uint64
			for _, r := range rs.Replicas {
				a, ok := rs.Applied[r]
				if !ok || first != 0 && a != first {
					converged = false
				}
				first = a
			}
			if len(rs.Replicas) < min(3, len(cl.Members())) {
				converged = false
			}
		}
		sort.Slice(states, func(i, j int) bool { return states[i].Shard < states[j].Shard })
		if converged || time.Now().After(deadline) || !sleepCtx(ctx, 500*time.Millisecond) {
			return states, converged
		}
	}
}
