package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
)

// The overload workload (issue #32): does one tenant's flood leave another
// tenant its service? Three phases, in one run:
//
//  1. ceiling: steady's closed-loop saturation on a queue of tenant C
//     measures the cluster's processed/s (or --ceiling gives it);
//  2. B alone: tenant B sends at --b-share of the ceiling, paced, with
//     consumers draining it;
//  3. A floods: B runs on unchanged while tenant A offers --a-factor times
//     the ceiling, open loop, with consumers of its own.
//
// B's latencies in 3 against 2, the cluster's processed/s in 3 against
// the ceiling, what A's sends were told, the nodes' peak RSS against their
// budgets and both tenants' ledgers are judged by the bars (overloadBars).

// rssEvery spaces the RSS samples of phases 2 and 3.
const rssEvery = 250 * time.Millisecond

// Bars of issue #32.
const (
	maxBP99Ratio       = 2.0 // B's p99s under the flood, over B's p99s alone
	minProcessedShare  = 0.8 // processed/s under the flood, over the ceiling
	minOfferedShare    = 0.9 // A's offered rate over its target: else the flood was not the one asked for
	barBEnqueue        = "b_enqueue_p99_ratio"
	barBClaim          = "b_claim_p99_ratio"
	barProcessed       = "processed_share_of_ceiling"
	barARefusals       = "a_failures_other_than_refusals_with_retry"
	barRSS             = "peak_rss_share_of_budget"
	barLedger          = "ledger_violations"
	barOffered         = "a_offered_share_of_target"
	ceilingFromFlag    = "--ceiling"
	ceilingFromMeasure = "measured"
)

type overloadResult struct {
	Workload  string          `json:"workload"`
	Revision  string          `json:"revision,omitempty"`
	Placement placement       `json:"placement"`
	Addrs     []string        `json:"addrs"`
	Size      int             `json:"size"`
	Tenants   overloadTenants `json:"tenants"`
	WarmupS   float64         `json:"warmup_s"`
	PhaseS    float64         `json:"phase_s"`

	CeilingPerS   float64     `json:"ceiling_per_s"`
	CeilingSource string      `json:"ceiling_source"` // measured or --ceiling
	CeilingRun    *ceilingRun `json:"ceiling_run,omitempty"`

	BShare  float64    `json:"b_share"`
	AFactor float64    `json:"a_factor"`
	BTarget float64    `json:"b_rate_target"` // msgs/s
	ATarget float64    `json:"a_rate_target"` // msgs/s offered
	AQuotas quotaFlags `json:"a_quotas"`

	BAlone bPhase `json:"b_alone"`
	BFlood bPhase `json:"b_flood"`
	A      aPhase `json:"a_flood"`
	// ProcessedPerS is what A and B had acked per second under the flood.
	ProcessedPerS float64 `json:"processed_per_s"`
	// CPU is what the flood window cost the nodes and the load generator,
	// per message processed.
	CPU cpuUse `json:"cpu"`

	Nodes       []nodeMemory `json:"nodes"`
	RSSSamples  int          `json:"rss_samples"`
	MemoryError string       `json:"memory_error,omitempty"`

	LedgerA      tally    `json:"ledger_a"`
	LedgerB      tally    `json:"ledger_b"`
	RedeliveredA uint64   `json:"redelivered_a"`
	RedeliveredB uint64   `json:"redelivered_b"`
	MissingA     []string `json:"missing_a,omitempty"`
	MissingB     []string `json:"missing_b,omitempty"`
	DrainS       float64  `json:"drain_s"`
	DrainError   string   `json:"drain_error,omitempty"`
	LastErrorA   string   `json:"last_error_a,omitempty"`
	LastErrorB   string   `json:"last_error_b,omitempty"`

	// Flat figures for scripts, as steady's *_ms fields.
	BEnqueueP99Alone    float64 `json:"b_enqueue_p99_alone_ms"`
	BEnqueueP99Flood    float64 `json:"b_enqueue_p99_flood_ms"`
	BReadyClaimP99Alone float64 `json:"b_ready_claim_p99_alone_ms"`
	BReadyClaimP99Flood float64 `json:"b_ready_claim_p99_flood_ms"`

	Bars []bar `json:"bars"`
	Pass bool  `json:"pass"`
}

type overloadTenants struct {
	A string `json:"a"`
	B string `json:"b"`
	C string `json:"c,omitempty"` // the ceiling phase's, when measured
}

type quotaFlags struct {
	SendRate    uint32 `json:"send_rate,omitempty"`
	SendBurst   uint32 `json:"send_burst,omitempty"`
	MaxMessages uint64 `json:"max_messages,omitempty"`
	MaxBytes    uint64 `json:"max_bytes,omitempty"`
	MaxInFlight uint64 `json:"max_in_flight,omitempty"`
}

func quotaFlagsOf(q client.Quotas) quotaFlags {
	return quotaFlags{SendRate: q.SendRate, SendBurst: q.SendBurst, MaxMessages: q.MaxMessages, MaxBytes: q.MaxBytes, MaxInFlight: q.MaxInFlight}
}

func (q quotaFlags) String() string {
	var parts []string
	add := func(name string, v uint64) {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, v))
		}
	}
	add("send_rate", uint64(q.SendRate))
	add("send_burst", uint64(q.SendBurst))
	add("max_messages", q.MaxMessages)
	add("max_bytes", q.MaxBytes)
	add("max_in_flight", q.MaxInFlight)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ceilingRun is the ceiling phase's steady run, in brief.
type ceilingRun struct {
	DurationS     float64 `json:"duration_s"`
	EnqueuePerS   float64 `json:"enqueue_per_s"`
	ProcessedPerS float64 `json:"processed_per_s"`
	EnqueueP99    float64 `json:"enqueue_p99_ms"`
	ReadyClaimP99 float64 `json:"ready_claim_p99_ms"`
	Lost          uint64  `json:"lost"`
	Unknown       uint64  `json:"unknown_sends"`
	// CPU is the ceiling window's, to set beside the flood's: on a
	// machine the load generator shares with the nodes, a flood costs the
	// generator CPU the nodes then lack.
	CPU cpuUse `json:"cpu"`
}

// bPhase is tenant B in one measured window. Enqueue is the Send call,
// refusals and the waits they asked for included (B sends a refused
// message again); ReadyClaim is the receive call less the server's
// long-poll wait, the claim bar's reading.
type bPhase struct {
	EnqueuePerS   float64 `json:"enqueue_per_s"`
	ProcessedPerS float64 `json:"processed_per_s"`
	// Refused counts B's sends refused in the window (each sent again).
	Refused    uint64  `json:"refused"`
	Enqueue    summary `json:"enqueue"`
	Claim      summary `json:"claim"`
	ReadyClaim summary `json:"ready_claim"`
	E2E        summary `json:"e2e"`
}

// aPhase is tenant A's flood. The rates are the measured window's;
// Outcomes count every send A made, warmup and the stop included, since
// one timeout anywhere is what the bar is about.
type aPhase struct {
	Producers     int          `json:"producers"`
	Inflight      int          `json:"inflight_calls_per_producer"`
	SendBatch     int          `json:"send_batch"`
	SendHold      bool         `json:"client_send_hold"`
	OfferedPerS   float64      `json:"offered_per_s"`
	AcceptedPerS  float64      `json:"accepted_per_s"`
	RefusedPerS   float64      `json:"refused_per_s"`
	ProcessedPerS float64      `json:"processed_per_s"`
	Outcomes      sendOutcomes `json:"outcomes"`
	// Enqueue is the SendBatch call of accepted messages; RetryAfter the
	// waits the cluster asked of refused ones.
	Enqueue    summary `json:"enqueue"`
	RetryAfter summary `json:"retry_after"`
	// Stalls counts calls that waited for one of the producer's call
	// slots: the load generator held the offered rate back.
	Stalls uint64 `json:"stalls"`
}

// nodeMemory is one node's peak RSS over phases 2 and 3 (the drain
// included) against its budget (0: none known).
type nodeMemory struct {
	Node    string `json:"node"`
	PeakRSS uint64 `json:"peak_rss"`
	Budget  uint64 `json:"budget"`
}

// bar is one of the bars: Value against Limit (at most, or at
// least for the shares of the ceiling and of A's target).
type bar struct {
	Name   string  `json:"name"`
	Pass   bool    `json:"pass"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Detail string  `json:"detail"`
}

func (r *overloadResult) rows() [][2]string {
	rows := [][2]string{
		{"workload", fmt.Sprintf("overload (revision %s)", r.Revision)},
		{"cluster", strings.Join(r.Addrs, ",")},
		{"leaders", r.Placement.row()},
		{"tenants", fmt.Sprintf("A %s, B %s%s", r.Tenants.A, r.Tenants.B, ifSet(r.Tenants.C, ", C (ceiling) ")+r.Tenants.C)},
		{"ceiling", fmt.Sprintf("%s processed/s (%s)", f0(r.CeilingPerS), r.CeilingSource)},
	}
	if c := r.CeilingRun; c != nil {
		rows = append(rows, [2]string{"ceiling run", fmt.Sprintf("%.0fs: enqueue %s/s, processed %s/s, enqueue p99 %.1f ms, claim once ready p99 %.1f ms, lost %d, unknown %d",
			c.DurationS, f0(c.EnqueuePerS), f0(c.ProcessedPerS), c.EnqueueP99, c.ReadyClaimP99, c.Lost, c.Unknown)},
			[2]string{"cpu in ceiling window", c.CPU.row()})
	}
	rows = append(rows,
		[2]string{"windows", fmt.Sprintf("%.0fs each after %.0fs warmup", r.PhaseS, r.WarmupS)},
		[2]string{"B", fmt.Sprintf("%.3g of the ceiling: %s msgs/s paced, Send with resend after a refusal", r.BShare, f0(r.BTarget))},
		[2]string{"A", fmt.Sprintf("%.3g x the ceiling: %s msgs/s offered, %d producers x %d SendBatch calls of %d, no retries, client send hold %s; quotas %s",
			r.AFactor, f0(r.ATarget), r.A.Producers, r.A.Inflight, r.A.SendBatch, onOff(r.A.SendHold), r.AQuotas)},
		[2]string{"B alone", r.BAlone.row(r.BTarget)},
		[2]string{"B under the flood", r.BFlood.row(r.BTarget)},
		[2]string{"B enqueue alone", lat(r.BAlone.Enqueue)},
		[2]string{"B enqueue flooded", lat(r.BFlood.Enqueue)},
		[2]string{"B claim once ready alone", lat(r.BAlone.ReadyClaim)},
		[2]string{"B claim once ready flooded", lat(r.BFlood.ReadyClaim)},
		[2]string{"B end to end alone", lat(r.BAlone.E2E)},
		[2]string{"B end to end flooded", lat(r.BFlood.E2E)},
		[2]string{"A in the window", fmt.Sprintf("offered %s/s, accepted %s/s, refused %s/s, processed %s/s; %d calls waited for a slot",
			f0(r.A.OfferedPerS), f0(r.A.AcceptedPerS), f0(r.A.RefusedPerS), f0(r.A.ProcessedPerS), r.A.Stalls)},
		[2]string{"A's sends", r.A.Outcomes.row()},
		[2]string{"A accepted enqueue", lat(r.A.Enqueue)},
		[2]string{"A told to retry after", lat(r.A.RetryAfter)},
		[2]string{"processed/s flooded", fmt.Sprintf("%s (A+B), %.2f of the ceiling", f0(r.ProcessedPerS), safeDiv(r.ProcessedPerS, r.CeilingPerS))},
		[2]string{"cpu in flood window", r.CPU.row()},
	)
	for _, n := range r.Nodes {
		budget := "no budget known"
		if n.Budget > 0 {
			budget = fmt.Sprintf("budget %s (%.2f)", mib(n.Budget), safeDiv(float64(n.PeakRSS), float64(n.Budget)))
		}
		rows = append(rows, [2]string{"peak RSS " + n.Node, fmt.Sprintf("%s, %s", mib(n.PeakRSS), budget)})
	}
	if r.MemoryError != "" {
		rows = append(rows, [2]string{"memory error", r.MemoryError})
	}
	rows = append(rows,
		[2]string{"ledger A", r.LedgerA.row(r.RedeliveredA)},
		[2]string{"ledger B", r.LedgerB.row(r.RedeliveredB)},
		[2]string{"drain", fmt.Sprintf("%.1fs%s", r.DrainS, ifSet(r.DrainError, ": ")+r.DrainError)},
	)
	if len(r.MissingA)+len(r.MissingB) > 0 {
		rows = append(rows, [2]string{"missing", fmt.Sprintf("A %s; B %s", strings.Join(r.MissingA, " "), strings.Join(r.MissingB, " "))})
	}
	if r.LastErrorA != "" {
		rows = append(rows, [2]string{"A's last error", r.LastErrorA})
	}
	if r.LastErrorB != "" {
		rows = append(rows, [2]string{"B's last error", r.LastErrorB})
	}
	for _, b := range r.Bars {
		verdict := "PASS"
		if !b.Pass {
			verdict = "FAIL"
		}
		rows = append(rows, [2]string{"bar " + b.Name, verdict + "  " + b.Detail})
	}
	return rows
}

// row names B's rate against its target: a B that fell behind it had all
// its sends in flight waiting, and measured fewer, slower sends.
func (p bPhase) row(target float64) string {
	return fmt.Sprintf("enqueued %s/s of %s/s paced, processed %s/s, %d sends refused (and sent again)", f0(p.EnqueuePerS), f0(target), f0(p.ProcessedPerS), p.Refused)
}

func (o sendOutcomes) row() string {
	return fmt.Sprintf("accepted %d, refused with a retry time %d (by the node %d, held by the client %d), refused without %d, timed out %d, unavailable %d, other errors %d",
		o.Accepted, o.Refused, o.Refused-o.Held, o.Held, o.RefusedBare, o.Timeouts, o.Unavailable, o.Other)
}

func (t tally) row(redelivered uint64) string {
	return fmt.Sprintf("acked %d, delivered %d, lost %d, duplicates %d (redelivered %d), unknown %d, refused %d (delivered anyway %d), foreign %d",
		t.Acked, t.Delivered, t.Lost, t.Duplicates, redelivered, t.Unknown, t.Refused, t.RefusedDelivered, t.Foreign)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func ifSet(s, text string) string {
	if s == "" {
		return ""
	}
	return text
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// overloadBars judges a run by the bars of issue #32, from its figures
// alone.
func overloadBars(r *overloadResult) []bar {
	var bars []bar
	ratio := func(name, what string, alone, flood summary) {
		b := bar{Name: name, Limit: maxBP99Ratio}
		switch {
		case alone.Count == 0 || alone.P99 <= 0:
			b.Detail = fmt.Sprintf("no %s measured with A idle", what)
		case flood.Count == 0:
			b.Detail = fmt.Sprintf("no %s measured under the flood: B got nothing through", what)
		default:
			b.Value = flood.P99 / alone.P99
			b.Pass = b.Value <= b.Limit
			b.Detail = fmt.Sprintf("B's %s p99 %.2f ms flooded / %.2f ms alone = %.2f (at most %.0f)", what, flood.P99, alone.P99, b.Value, b.Limit)
		}
		bars = append(bars, b)
	}
	ratio(barBEnqueue, "enqueue", r.BAlone.Enqueue, r.BFlood.Enqueue)
	ratio(barBClaim, "claim once ready", r.BAlone.ReadyClaim, r.BFlood.ReadyClaim)

	// With a send_rate quota A cannot take the cluster's capacity, so the
	// cluster is judged on what B and A's quota can use of it.
	pb := bar{Name: barProcessed, Limit: minProcessedShare}
	ref, refText := r.CeilingPerS, "ceiling"
	if q := float64(r.AQuotas.SendRate); q > 0 && r.BTarget+q < ref {
		ref, refText = r.BTarget+q, "B's rate + A's send_rate quota"
	}
	if ref > 0 {
		pb.Value = r.ProcessedPerS / ref
		pb.Pass = pb.Value >= pb.Limit
		pb.Detail = fmt.Sprintf("%s processed/s flooded / %s %s = %.2f (at least %.1f)", f0(r.ProcessedPerS), f0(ref), refText, pb.Value, pb.Limit)
	} else {
		pb.Detail = "no ceiling"
	}
	bars = append(bars, pb)

	o := r.A.Outcomes
	ab := bar{Name: barARefusals, Value: float64(o.failedOtherwise()), Limit: 0}
	ab.Pass = o.failedOtherwise() == 0
	ab.Detail = fmt.Sprintf("A refused with a retry time %d; refused without one %d, timed out %d, unavailable %d, other %d (want 0)",
		o.Refused, o.RefusedBare, o.Timeouts, o.Unavailable, o.Other)
	bars = append(bars, ab)

	mb := bar{Name: barRSS, Limit: 1}
	var parts []string
	unknown := r.MemoryError != "" || len(r.Nodes) == 0
	for _, n := range r.Nodes {
		if n.Budget == 0 {
			unknown = true
			parts = append(parts, fmt.Sprintf("%s %s of no known budget", n.Node, mib(n.PeakRSS)))
			continue
		}
		share := float64(n.PeakRSS) / float64(n.Budget)
		mb.Value = max(mb.Value, share)
		parts = append(parts, fmt.Sprintf("%s %s of %s", n.Node, mib(n.PeakRSS), mib(n.Budget)))
	}
	switch {
	case len(r.Nodes) == 0:
		mb.Detail = "no node's RSS read: " + r.MemoryError
	case unknown:
		mb.Detail = strings.Join(parts, ", ") + ifSet(r.MemoryError, "; ") + r.MemoryError + " (pass --budget, or --metrics of nodes that report one)"
	default:
		mb.Pass = mb.Value <= mb.Limit
		mb.Detail = fmt.Sprintf("peak RSS %s: at most %.2f of a budget (at most 1)", strings.Join(parts, ", "), mb.Value)
	}
	bars = append(bars, mb)

	lb := bar{Name: barLedger, Limit: 0}
	v := violations(r.LedgerA, r.RedeliveredA) + violations(r.LedgerB, r.RedeliveredB)
	lb.Value, lb.Pass = float64(v), v == 0
	lb.Detail = fmt.Sprintf("A lost %d, B lost %d; refused yet delivered %d; foreign %d; duplicates beyond redeliveries %d (want 0)",
		r.LedgerA.Lost, r.LedgerB.Lost, r.LedgerA.RefusedDelivered+r.LedgerB.RefusedDelivered, r.LedgerA.Foreign+r.LedgerB.Foreign,
		excessDuplicates(r.LedgerA, r.RedeliveredA)+excessDuplicates(r.LedgerB, r.RedeliveredB))
	bars = append(bars, lb)

	ob := bar{Name: barOffered, Limit: minOfferedShare}
	if r.ATarget > 0 {
		ob.Value = r.A.OfferedPerS / r.ATarget
		ob.Pass = ob.Value >= ob.Limit
		ob.Detail = fmt.Sprintf("A offered %s/s of its %s/s target = %.2f (at least %.1f; below it the load generator, not the cluster, held A back: %d calls waited for a slot)",
			f0(r.A.OfferedPerS), f0(r.ATarget), ob.Value, ob.Limit, r.A.Stalls)
	} else {
		ob.Detail = "no target"
	}
	bars = append(bars, ob)
	return bars
}

// excessDuplicates is the deliveries beyond a message's first that no
// redelivery explains: a send stored twice. At-least-once allows a second
// delivery only after a lease ran out, which the receive count shows.
func excessDuplicates(t tally, redelivered uint64) uint64 {
	if t.Duplicates > redelivered {
		return t.Duplicates - redelivered
	}
	return 0
}

// violations counts what a ledger must never show.
func violations(t tally, redelivered uint64) uint64 {
	return t.Lost + t.RefusedDelivered + t.Foreign + excessDuplicates(t, redelivered)
}

// failedBars names the bars a run missed.
func failedBars(bars []bar) []string {
	var out []string
	for _, b := range bars {
		if !b.Pass {
			out = append(out, b.Name)
		}
	}
	return out
}

// tenantNames makes the run's tenant names from --queue (validated as a
// tenant-name prefix) and a run id: tenants, like queues, are the run's own.
func tenantNames(prefix string, id int64) overloadTenants {
	return overloadTenants{A: fmt.Sprintf("%s-a-%d", prefix, id), B: fmt.Sprintf("%s-b-%d", prefix, id), C: fmt.Sprintf("%s-c-%d", prefix, id)}
}

func runOverload(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	nodes, err := newNodeSource(cfg.Pids, cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	admin, where, err := dial(ctx, cfg, stderr)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	r := &overloadResult{Workload: "overload", Revision: revision(), Placement: where, Addrs: cfg.Addrs, Size: cfg.Size,
		Tenants: tenantNames(cfg.Queue, time.Now().UnixNano()%1_000_000_000), WarmupS: cfg.Warmup.Seconds(), PhaseS: cfg.PhaseDuration.Seconds(),
		BShare: cfg.BShare, AFactor: cfg.AFactor, AQuotas: quotaFlagsOf(cfg.aQuotas()),
		A: aPhase{Producers: cfg.AProducers, Inflight: cfg.AInflight, SendBatch: cfg.ASendBatch, SendHold: cfg.ASendHold}}

	// 1. The ceiling.
	r.CeilingPerS, r.CeilingSource = cfg.Ceiling, ceilingFromFlag
	if cfg.Ceiling == 0 {
		r.CeilingSource = ceilingFromMeasure
		if err := createTenant(ctx, admin, r.Tenants.C, client.Quotas{}); err != nil {
			return nil, err
		}
		defer deleteTenant(admin, r.Tenants.C, stderr)
		cc := cfg
		cc.Queue, cc.Duration, cc.Rate = r.Tenants.C+"/"+cfg.Queue, cfg.CeilingDuration, 0
		sr, err := steadyOnce(ctx, admin, cc, stderr, "ceiling")
		if sr != nil {
			r.CeilingRun = &ceilingRun{DurationS: sr.DurationS, EnqueuePerS: sr.EnqueuePerS, ProcessedPerS: sr.ProcessedPerS,
				EnqueueP99: sr.EnqueueP99, ReadyClaimP99: sr.ReadyClaimP99, Lost: sr.Lost, Unknown: sr.Unknown, CPU: sr.CPU}
			r.CeilingPerS = sr.ProcessedPerS
		}
		if err != nil {
			return r, fmt.Errorf("ceiling phase: %w", err)
		}
		if r.CeilingPerS <= 0 {
			return r, fmt.Errorf("ceiling phase: nothing processed")
		}
	} else {
		r.Tenants.C = ""
	}
	r.BTarget, r.ATarget = cfg.BShare*r.CeilingPerS, cfg.AFactor*r.CeilingPerS

	// Each tenant has its own client, so its own connections, as two
	// applications would: A's calls queued in A's connections are not B's
	// wait. A's client makes each call once, so every refusal reaches the
	// bench, where it is counted, instead of being waited out inside the
	// client's retry budget.
	cA, err := dialClient(ctx, cfg, client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}),
		client.WithSendHold(cfg.ASendHold))
	if err != nil {
		return r, fmt.Errorf("tenant A's client: %w", err)
	}
	defer cA.Close()
	// A's consumers are an application of their own, as they would be:
	// sharing the flood's connections, their receives and acks queued
	// behind thousands of its calls, and without retries.
	cAc, err := dialClient(ctx, cfg)
	if err != nil {
		return r, fmt.Errorf("tenant A's consumers' client: %w", err)
	}
	defer cAc.Close()
	cB, err := dialClient(ctx, cfg)
	if err != nil {
		return r, fmt.Errorf("tenant B's client: %w", err)
	}
	defer cB.Close()
	if err := createTenant(ctx, admin, r.Tenants.A, cfg.aQuotas()); err != nil {
		return r, err
	}
	defer deleteTenant(admin, r.Tenants.A, stderr)
	if err := createTenant(ctx, admin, r.Tenants.B, client.Quotas{}); err != nil {
		return r, err
	}
	defer deleteTenant(admin, r.Tenants.B, stderr)
	qA, qB := r.Tenants.A+"/"+cfg.Queue, r.Tenants.B+"/"+cfg.Queue
	for _, q := range []string{qA, qB} {
		if err := createQueue(ctx, admin, q, defaultQueue(cfg)); err != nil {
			return r, err
		}
		defer deleteQueue(admin, q)
	}
	budgets, budgetErr := nodeBudgets(ctx, cfg, len(nodes.names()))

	asyncAck := cfg.AckMode == "async"
	bl := newLoad(cB, qB, loadSpec{producers: cfg.BProducers, inflight: cfg.BInflight, sendBatch: 1,
		consumers: cfg.BConsumers, batch: cfg.BBatch, asyncAck: asyncAck, size: cfg.Size, seed: cfg.Seed + 1, rate: r.BTarget, resendRefused: true})
	al := newLoad(cA, qA, loadSpec{consumerClient: cAc, producers: cfg.AProducers, inflight: cfg.AInflight, sendBatch: cfg.ASendBatch, flood: true,
		consumers: cfg.Consumers, batch: cfg.Batch, asyncAck: asyncAck, size: cfg.Size, seed: cfg.Seed + 2, rate: r.ATarget})

	var phase atomic.Value
	phase.Store("B alone")
	var line overloadLine
	prog := startProgress(ctx, stderr, cfg.Quiet, cfg.ProgressEvery, func(e time.Duration) string {
		return line.format(phase.Load().(string), e, bl, al)
	})
	defer prog.done()
	rss := sampleRSS(ctx, nodes, rssEvery)

	// 2. B alone. B's consumers and producers run on through phase 3.
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	bl.startConsumers(bctx)
	bl.startProducers(ctx)
	sleep(ctx, cfg.Warmup)
	r.BAlone = measureB(ctx, bl, cfg.PhaseDuration)

	// 3. A floods.
	phase.Store("A floods")
	actx, stopA := context.WithCancel(ctx)
	defer stopA()
	al.startConsumers(actx)
	al.startProducers(ctx)
	sleep(ctx, cfg.Warmup)
	for _, l := range []*load{al, bl} {
		l.resetLatencies()
		l.measuring.Store(true)
	}
	a0, b0, cpu0 := al.snapshot(), bl.snapshot(), nodes.cpu(ctx)
	sleep(ctx, cfg.PhaseDuration)
	a1, b1, cpu1 := al.snapshot(), bl.snapshot(), nodes.cpu(ctx)
	al.measuring.Store(false)
	bl.measuring.Store(false)
	r.BFlood = bPhaseOf(bl, b0, b1)
	r.A.OfferedPerS = rate(a0, a1, func(c counters) uint64 { return c.offered })
	r.A.AcceptedPerS = rate(a0, a1, func(c counters) uint64 { return c.enqueued })
	r.A.RefusedPerS = rate(a0, a1, func(c counters) uint64 { return c.refused })
	r.A.ProcessedPerS = rate(a0, a1, func(c counters) uint64 { return c.processed })
	r.ProcessedPerS = r.A.ProcessedPerS + r.BFlood.ProcessedPerS
	r.CPU = cpu0.use(cpu1, a1.processed-a0.processed+b1.processed-b0.processed)
	r.A.Enqueue, r.A.RetryAfter = al.enqueue.summary(), al.retryAfter.summary()

	// Stop sending, and drain what both tenants were told was stored.
	phase.Store("drain")
	al.stopProducers()
	bl.stopProducers()
	drainStart := time.Now()
	drainErr := errors.Join(waitDrained(ctx, al, cfg.DrainLimit), waitDrained(ctx, bl, cfg.DrainLimit-time.Since(drainStart)))
	r.DrainS = time.Since(drainStart).Seconds()
	if drainErr != nil {
		r.DrainError = drainErr.Error()
	}
	stopA()
	stopB()
	al.consWG.Wait()
	bl.consWG.Wait()
	prog.done()
	peaks, samples, rssErr := rss.finish()
	r.Nodes, r.RSSSamples = nodeMemories(nodes.names(), peaks, budgets), samples
	if err := errors.Join(rssErr, budgetErr); err != nil {
		r.MemoryError = err.Error()
	}

	r.A.Outcomes, r.A.Stalls = al.outcomeCounts(), al.floodStalls.Load()
	r.LedgerA, r.LedgerB = al.led.tally(), bl.led.tally()
	r.RedeliveredA, r.RedeliveredB = al.redelivered.Load(), bl.redelivered.Load()
	if r.LedgerA.Lost > 0 {
		r.MissingA = al.led.missing(10)
	}
	if r.LedgerB.Lost > 0 {
		r.MissingB = bl.led.missing(10)
	}
	r.LastErrorA, r.LastErrorB = lastError(al), lastError(bl)
	r.BEnqueueP99Alone, r.BEnqueueP99Flood = r.BAlone.Enqueue.P99, r.BFlood.Enqueue.P99
	r.BReadyClaimP99Alone, r.BReadyClaimP99Flood = r.BAlone.ReadyClaim.P99, r.BFlood.ReadyClaim.P99
	r.Bars = overloadBars(r)
	failed := failedBars(r.Bars)
	r.Pass = len(failed) == 0
	if ctx.Err() != nil {
		return r, fmt.Errorf("overload: interrupted: %w", ctx.Err())
	}
	if !r.Pass {
		return r, fmt.Errorf("%w: overload bars missed: %s", errFailed, strings.Join(failed, ", "))
	}
	return r, nil
}

// measureB measures B over one window, its latencies from empty.
func measureB(ctx context.Context, bl *load, d time.Duration) bPhase {
	bl.resetLatencies()
	bl.measuring.Store(true)
	a := bl.snapshot()
	sleep(ctx, d)
	b := bl.snapshot()
	bl.measuring.Store(false)
	return bPhaseOf(bl, a, b)
}

func bPhaseOf(bl *load, a, b counters) bPhase {
	return bPhase{
		EnqueuePerS:   rate(a, b, func(c counters) uint64 { return c.enqueued }),
		ProcessedPerS: rate(a, b, func(c counters) uint64 { return c.processed }),
		Refused:       b.refused - a.refused,
		Enqueue:       bl.enqueue.summary(), Claim: bl.claim.summary(), ReadyClaim: bl.readyClaim.summary(), E2E: bl.e2e.summary(),
	}
}

// waitDrained is load.drain with a limit that may already be spent.
func waitDrained(ctx context.Context, l *load, limit time.Duration) error {
	_, err := l.drain(ctx, max(limit, time.Millisecond))
	return err
}

// nodeBudgets is each of n nodes' memory budget: --budget for all, else
// what each node reports on --metrics.
func nodeBudgets(ctx context.Context, cfg config, n int) ([]uint64, error) {
	if b, _ := parseBytes(cfg.Budget); b > 0 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = b
		}
		return out, nil
	}
	return memoryBudgets(ctx, cfg.Metrics)
}

// nodeMemories pairs each node's peak with its budget, in order; a node
// without either reads 0 (no budget known).
func nodeMemories(names []string, peaks, budgets []uint64) []nodeMemory {
	out := make([]nodeMemory, len(names))
	for i, n := range names {
		out[i].Node = n
		if i < len(peaks) {
			out[i].PeakRSS = peaks[i]
		}
		if i < len(budgets) {
			out[i].Budget = budgets[i]
		}
	}
	return out
}

func createTenant(ctx context.Context, c *client.Client, name string, q client.Quotas) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.CreateTenant(cctx, name, q); err != nil {
		return fmt.Errorf("create bench tenant: %w", err)
	}
	return nil
}

// deleteTenant removes a run's tenant once its queues are gone, best
// effort: a leftover tenant costs a meta record, not correctness, but it
// is named so it can be removed by hand.
func deleteTenant(c *client.Client, name string, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.DeleteTenant(ctx, name); err != nil {
		fmt.Fprintf(stderr, "raftq-bench: leaving tenant %s behind: %v\n", name, err)
	}
}

// overloadLine is the progress line of phases 2 and 3: both tenants' rates
// since the last line, and B's p99s over it.
type overloadLine struct {
	last   time.Time
	la, lb counters
}

func (o *overloadLine) format(phase string, elapsed time.Duration, bl, al *load) string {
	a, b := al.snapshot(), bl.snapshot()
	per := func(f func(counters) uint64, from, to counters) float64 {
		if o.last.IsZero() {
			return 0
		}
		return rate(from, to, f)
	}
	enq := func(c counters) uint64 { return c.enqueued }
	proc := func(c counters) uint64 { return c.processed }
	line := fmt.Sprintf("[%s %5.0fs] B enqueued %.0f/s processed %.0f/s refused %d", phase, elapsed.Seconds(),
		per(enq, o.lb, b), per(proc, o.lb, b), b.refused)
	if a.offered > 0 {
		line += fmt.Sprintf(" | A offered %.0f/s accepted %.0f/s refused %.0f/s processed %.0f/s",
			per(func(c counters) uint64 { return c.offered }, o.la, a), per(enq, o.la, a),
			per(func(c counters) uint64 { return c.refused }, o.la, a), per(proc, o.la, a))
	}
	o.last, o.la, o.lb = time.Now(), a, b
	if enqP99, n := bl.enqueue.interval(); n > 0 {
		ready, _ := bl.readyClaim.interval()
		line += fmt.Sprintf(" | B p99 enqueue %.0f ms claim once ready %.0f ms", enqP99, ready)
	}
	return line
}
