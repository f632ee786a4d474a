package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/raftq/raftq/client"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// config holds every workload's flags; each subcommand registers the ones
// it reads.
type config struct {
	Workload string
	Addrs    []string
	// CA, if set, is the CA file the nodes' certificates chain to: the
	// bench dials with TLS (a cluster started without --insecure).
	// Insecure dials in plaintext whatever CA is around.
	CA       string
	Insecure bool
	// Cert and Key are a client certificate to present (a cluster run
	// with --client-auth require).
	Cert, Key string
	// Token is an API key to call with (it takes precedence over a
	// certificate; the bench creates its queue, so it needs admin on it).
	Token string
	Seed  uint64
	JSON  bool
	Quiet bool
	// ProgressEvery is the progress line's interval (0: 1 s on a terminal,
	// 5 s otherwise).
	ProgressEvery time.Duration
	Queue         string // queue name prefix; a unique suffix is added per run
	// CPUProfile, if set, receives the load generator's own CPU profile:
	// the bench shares the machine with the cluster, so its cost counts.
	CPUProfile string
	// Settle bounds the wait for shard leaders to reach their preferred
	// replicas before a run (0: do not wait).
	Settle time.Duration
	// DedupWindow is the bench queue's dedup window (0: the server's
	// default). Every send carries a key (the client's AutoDedup), so the
	// window sets how many keys each replica holds.
	DedupWindow time.Duration

	Producers  int
	Consumers  int
	Size       int
	Duration   time.Duration
	Warmup     time.Duration
	Inflight   int     // sends each producer keeps outstanding
	SendBatch  int     // messages per Send call (1: Send, >1: SendBatch)
	SendMode   string  // sync: a goroutine per send in flight; async: SendAsync
	Batch      int     // most messages a consumer takes per receive
	AckMode    string  // sync: wait for each batch's ack before receiving again; async: ack in the background
	Rate       float64 // total enqueue rate cap in msgs/s; 0: unbounded
	ChurnRate  float64 // scheduled: cap on the backlog's churn in msgs/s; 0: unbounded
	DrainLimit time.Duration

	// mix
	Messages    int
	Visibility  time.Duration
	MaxReceives int

	// backlog and scheduled
	Backlog   int
	Pids      string
	Metrics   string
	Scheduled int
	Due       time.Duration

	// sweep
	Concurrency []int
	Batches     []int

	// topic: Subs lists the subscription counts to run, one cell each;
	// Consumers is per subscription. Hold, when set, publishes that many
	// messages with the consumers stopped and reads node memory before
	// draining. Pprof are the nodes' --pprof-bind URLs, to force a GC
	// before each memory reading.
	Subs  []int
	Hold  int
	Pprof string
	// MaxBacklog holds the topic's producers while more copies than this
	// wait for their consumers (0: never).
	MaxBacklog int64

	// overload: the ceiling phase runs with the steady flags above
	// (--producers, --inflight, --consumers, --batch), and tenant A's
	// consumers take the same --consumers and --batch.
	Ceiling         float64 // processed/s; 0: measure it first
	CeilingDuration time.Duration
	PhaseDuration   time.Duration
	BShare          float64 // B's send rate as a share of the ceiling
	BProducers      int
	BInflight       int // B's sends in flight per producer
	BConsumers      int
	BBatch          int
	AFactor         float64 // A's offered send rate as a multiple of the ceiling
	AProducers      int
	AInflight       int // A's SendBatch calls in flight per producer
	ASendBatch      int
	ASendHold       bool // A's client keeps the nodes' refusals (client.WithSendHold)
	// A's tenant quotas (0: none). MaxBytes and Budget are sizes as given
	// ("64MiB"); validate parses them.
	ASendRate, ASendBurst, AMaxMessages, AMaxInFlight uint64
	AMaxBytes                                         string
	// Budget, if set, is every node's memory budget, instead of what each
	// node reports (raftq_memory_budget_bytes).
	Budget string
}

var errUsage = errors.New("invalid arguments")

const usage = `raftq-bench <workload> [flags]

workloads:
  steady     producers and consumers at full speed (or --rate); throughput, latencies, ledger
  mix        fast, slow (lease extension), flapping and poison handlers via the worker SDK
  backlog    seed N messages with SendBatch, then drain cold; drain rate, memory per message
  scheduled  messages due at now+--due while a backlog churns; lateness past due
  sweep      steady over concurrency x receive batch; prints a table
  topic      publish to a topic with --subs N subscriptions, each drained by its own consumers; deliveries/s, ledger per subscription; --hold M: node memory per held message
  overload   tenant A floods at 10 x the ceiling while tenant B runs at 5 %; B's latency, throughput, refusals, memory, ledger

Run "raftq-bench <workload> -h" for the workload's flags.
`

// parseArgs parses a command line (without the program name).
func parseArgs(args []string, stderr io.Writer) (config, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, usage)
		return config{}, errUsage
	}
	c := config{Workload: args[0]}
	fs := flag.NewFlagSet("raftq-bench "+c.Workload, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addrs := fs.String("addr", "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", "comma-separated gRPC addresses of cluster nodes (seeds)")
	fs.StringVar(&c.CA, "ca", os.Getenv("RAFTQ_CA"), "CA file of the nodes' certificates: dial with TLS (env RAFTQ_CA; default "+devCA+" when it exists, as make run makes it)")
	fs.StringVar(&c.Cert, "cert", os.Getenv("RAFTQ_CERT"), "client certificate to present (env RAFTQ_CERT; default "+devCert+" when --ca defaults)")
	fs.StringVar(&c.Key, "key", os.Getenv("RAFTQ_KEY"), "its key (env RAFTQ_KEY)")
	fs.StringVar(&c.Token, "token", os.Getenv("RAFTQ_TOKEN"), "API key to call with, admin of the bench's queues (env RAFTQ_TOKEN; raftq keys create)")
	insecure, _ := strconv.ParseBool(os.Getenv("RAFTQ_INSECURE"))
	fs.BoolVar(&c.Insecure, "insecure", insecure, "dial in plaintext, for nodes run with --insecure (env RAFTQ_INSECURE)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed for bodies, the mix and jitter: the same seed gives the same workload")
	fs.BoolVar(&c.JSON, "json", false, "print the result as one JSON object on stdout")
	fs.BoolVar(&c.Quiet, "quiet", false, "no progress line on stderr")
	fs.DurationVar(&c.ProgressEvery, "progress-every", 0, "progress line interval (0: 1s on a terminal, 5s otherwise); steady's line carries the interval's p99s")
	fs.StringVar(&c.Queue, "queue", "bench", "queue name prefix (a unique suffix is added per run)")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write the load generator's CPU profile to this file")
	fs.DurationVar(&c.DedupWindow, "dedup-window", 0, "dedup window of the bench queue (0: the server's default, 5m); every send carries a dedup key, so this sets how many keys each replica keeps")
	fs.DurationVar(&c.Settle, "settle", 15*time.Second, "wait up to this long for every shard to be led by its preferred replica before the run (a fresh cluster moves leaders in its first seconds); 0: do not wait")
	fs.IntVar(&c.Size, "size", 1024, "message body bytes (at least 24: the ledger header)")
	fs.DurationVar(&c.DrainLimit, "drain-timeout", 3*time.Minute, "bound for draining after producers stop")
	load := func(producers, consumers, batch int) {
		fs.IntVar(&c.Producers, "producers", producers, "producer goroutines")
		fs.IntVar(&c.Consumers, "consumers", consumers, "consumer goroutines")
		fs.IntVar(&c.Batch, "batch", batch, "most messages a consumer takes per receive (1-1000)")
		fs.StringVar(&c.AckMode, "ack", "async", "consumer acks: async (ack each batch in the background, up to 4 ack calls outstanding per consumer, and receive again at once; "+
			"a message counts as processed when its ack is committed) or sync (wait for the ack before the next receive)")
	}
	nodes := func() {
		fs.StringVar(&c.Pids, "pids", "", "comma-separated node PIDs: node memory and CPU from /proc (same host)")
		fs.StringVar(&c.Metrics, "metrics", "http://127.0.0.1:7401/metrics,http://127.0.0.1:7402/metrics,http://127.0.0.1:7403/metrics", "node metrics URLs, for node memory and CPU when --pids is empty (point them at the cluster under test)")
	}
	timed := func() {
		fs.DurationVar(&c.Duration, "duration", 20*time.Second, "measured duration")
		fs.DurationVar(&c.Warmup, "warmup", 3*time.Second, "warmup before measuring (not counted)")
		fs.IntVar(&c.Inflight, "inflight", 256, "sends each producer keeps outstanding (1: synchronous)")
		fs.IntVar(&c.SendBatch, "send-batch", 1, "messages per send call: 1 uses Send (one RPC per message), >1 SendBatch; must divide --inflight")
		fs.StringVar(&c.SendMode, "send-mode", "sync", "sync: each producer runs --inflight goroutines, each blocked in Send; async: one goroutine per producer keeps --inflight SendAsync calls outstanding (as NATS's PublishAsync)")
		fs.Float64Var(&c.Rate, "rate", 0, "cap on the total enqueue rate in msgs/s (0: as fast as the cluster takes them)")
	}
	withBacklog := func(def int) {
		fs.IntVar(&c.Backlog, "backlog", def, "messages to seed (at most 5,000,000)")
		nodes()
	}
	after := func() {}
	switch c.Workload {
	case "steady":
		load(16, 8, 256)
		timed()
		nodes()
	case "mix":
		load(4, 64, 32)
		fs.IntVar(&c.Messages, "messages", 2000, "messages to send (70% fast, 20% slow, 5% flapping, 5% poison)")
		fs.DurationVar(&c.Visibility, "visibility", 1*time.Second, "lease length; slow handlers (200 ms-2 s) outlive it and need extensions")
		fs.IntVar(&c.MaxReceives, "max-receives", 3, "queue max receive count: poison goes to the DLQ after exactly this many")
	case "backlog":
		load(8, 8, 256)
		withBacklog(1_000_000)
		fs.IntVar(&c.SendBatch, "send-batch", 256, "messages per SendBatch call while seeding")
		fs.IntVar(&c.Inflight, "inflight", 4, "SendBatch calls each producer keeps outstanding while seeding")
	case "scheduled":
		load(4, 4, 256)
		withBacklog(1_000_000)
		fs.IntVar(&c.SendBatch, "send-batch", 256, "messages per SendBatch call while seeding")
		fs.IntVar(&c.Inflight, "inflight", 4, "SendBatch calls each producer keeps outstanding while seeding")
		fs.IntVar(&c.Scheduled, "scheduled", 5000, "delayed messages to send, spread over --duration")
		fs.DurationVar(&c.Due, "due", 5*time.Second, "delay of each scheduled message")
		fs.DurationVar(&c.Duration, "duration", 20*time.Second, "how long scheduled messages are sent while the backlog churns")
		fs.Float64Var(&c.ChurnRate, "churn-rate", 0, "cap on the backlog's churn in msgs/s: what the consumers take, which the producers put back (0: as fast as the cluster goes)")
	case "sweep":
		load(16, 8, 0)
		fs.DurationVar(&c.Duration, "duration", 6*time.Second, "measured duration per cell")
		fs.DurationVar(&c.Warmup, "warmup", 2*time.Second, "warmup per cell")
		conc := fs.String("concurrency", "16,64,256,512", "total sends in flight per cell (split over --producers)")
		batches := fs.String("batches", "1,10,100", "receive batch sizes")
		c.SendBatch = 1
		// Unparsable lists stay nil and validate names the flag.
		after = func() {
			c.Concurrency, _ = intList(*conc)
			c.Batches, _ = intList(*batches)
		}
	case "topic":
		c.registerTopic(fs, load, nodes)
		subs := fs.String("subs", "1", "comma-separated subscription counts: one cell per count, each on a topic and subscriptions of its own, in order (1,4,16)")
		after = func() { c.Subs, _ = intList(*subs) }
	case "overload":
		// The ceiling phase is steady's headline; A is drained by
		// --consumers x --batch like it.
		load(16, 8, 256)
		nodes()
		fs.DurationVar(&c.Warmup, "warmup", 3*time.Second, "warmup before each measured window (not counted)")
		fs.IntVar(&c.Inflight, "inflight", 256, "ceiling phase: sends each producer keeps outstanding")
		fs.StringVar(&c.SendMode, "send-mode", "sync", "ceiling phase: sync or async producers, as steady's")
		c.SendBatch = 1
		fs.Float64Var(&c.Ceiling, "ceiling", 0, "the cluster's processed/s; 0: measure it first, closed loop as steady does, for --ceiling-duration")
		fs.DurationVar(&c.CeilingDuration, "ceiling-duration", 15*time.Second, "measured window of the ceiling phase")
		fs.DurationVar(&c.PhaseDuration, "phase-duration", 10*time.Second, "measured window of each of the phases B alone and A floods")
		fs.Float64Var(&c.BShare, "b-share", 0.05, "tenant B's send rate as a share of the ceiling")
		fs.IntVar(&c.BProducers, "b-producers", 4, "tenant B's producers")
		fs.IntVar(&c.BInflight, "b-inflight", 256, "tenant B's sends in flight per producer, each a goroutine blocked in Send (B is paced: these bound how long a send may take before B falls behind its rate)")
		fs.IntVar(&c.BConsumers, "b-consumers", 2, "tenant B's consumers")
		fs.IntVar(&c.BBatch, "b-batch", 32, "most messages one of B's consumers takes per receive")
		fs.Float64Var(&c.AFactor, "a-factor", 10, "tenant A's offered send rate as a multiple of the ceiling")
		fs.IntVar(&c.AProducers, "a-producers", 4, "tenant A's producers, each starting SendBatch calls at its share of A's rate whatever the earlier ones got")
		// A leader queues up to 8 MiB of sends before it refuses any
		// (shard/sendqueue.go), and more are in raft: A needs more than
		// that in flight to be refused at all, and calls enough to offer
		// its rate while the taken ones wait.
		fs.IntVar(&c.AInflight, "a-inflight", 512, "SendBatch calls each of A's producers may have outstanding (to be refused at all, A must have more in flight than a leader queues: 8 MiB)")
		// 60 messages of 1 KiB with their dedup keys and framing (about
		// 64.5 KB) fit a 64 KiB buffer of the client's gRPC pool
		// (internal/bufpool), which is cleared whole on every marshal; 64
		// took a 128 KiB one, and clearing it was a third of the load
		// generator's CPU in a flood.
		fs.IntVar(&c.ASendBatch, "a-send-batch", 60, "messages per SendBatch call of tenant A (with --size 1024, 60 fill a 64 KiB marshal buffer)")
		fs.BoolVar(&c.ASendHold, "a-send-hold", true, "tenant A's client keeps a node's refusal of its sends for the retry time, answering its next sends itself (client.WithSendHold); false: every send reaches a node, a client that ignores retry times")
		fs.Uint64Var(&c.ASendRate, "a-send-rate", 0, "tenant A's send_rate quota, msgs/s (0: none)")
		fs.Uint64Var(&c.ASendBurst, "a-send-burst", 0, "tenant A's send_burst quota (0: the rate)")
		fs.Uint64Var(&c.AMaxMessages, "a-max-messages", 0, "tenant A's max_messages quota (0: none)")
		fs.StringVar(&c.AMaxBytes, "a-max-bytes", "", "tenant A's max_bytes quota, e.g. 64MiB (empty: none)")
		fs.Uint64Var(&c.AMaxInFlight, "a-max-inflight", 0, "tenant A's max_in_flight quota: leased messages (0: none)")
		fs.StringVar(&c.Budget, "budget", "", "every node's memory budget for the RSS bar, e.g. 2GiB (empty: each node's raftq_memory_budget_bytes from --metrics, in --pids order when --pids is set)")
	default:
		fmt.Fprint(stderr, usage)
		return config{}, fmt.Errorf("unknown workload %q: %w", c.Workload, errUsage)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return config{}, fmt.Errorf("%s flags: %w", c.Workload, err)
	}
	after()
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("%s: unexpected arguments %q", c.Workload, fs.Args())
	}
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Addrs = append(c.Addrs, a)
		}
	}
	return c, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var v int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &v); err != nil {
			return nil, fmt.Errorf("list %q: %w", s, err)
		}
		out = append(out, v)
	}
	return out, nil
}

const maxBacklog = 5_000_000

// sendOverhead is what a message adds to its body in a SendBatch request:
// its auto dedup key and the protobuf framing.
const sendOverhead = 64

// validate bounds every flag so a typo cannot start an unbounded run.
func (c config) validate() error {
	var errs []error
	check := func(ok bool, format string, a ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, a...))
		}
	}
	check(len(c.Addrs) > 0, "--addr: no address")
	check(c.Size >= minBodySize && c.Size <= 256<<10, "--size %d outside %d-262144", c.Size, minBodySize)
	check(c.Producers >= 1 && c.Producers <= 1024, "--producers %d outside 1-1024", c.Producers)
	check(c.Consumers >= 1 && c.Consumers <= 1024, "--consumers %d outside 1-1024", c.Consumers)
	check(c.DrainLimit > 0 && c.DrainLimit <= time.Hour, "--drain-timeout %v outside (0, 1h]", c.DrainLimit)
	check(c.Settle >= 0 && c.Settle <= 5*time.Minute, "--settle %v outside [0, 5m]", c.Settle)
	check(c.ProgressEvery == 0 || (c.ProgressEvery >= 100*time.Millisecond && c.ProgressEvery <= time.Hour), "--progress-every %v outside [100ms, 1h] (0: automatic)", c.ProgressEvery)
	check(c.DedupWindow == 0 || (c.DedupWindow >= time.Millisecond && c.DedupWindow <= 14*24*time.Hour), "--dedup-window %v outside [1ms, 336h] (0: server default)", c.DedupWindow)
	check(c.AckMode == "sync" || c.AckMode == "async" || c.Workload == "mix", "--ack %q: want sync or async", c.AckMode)
	if c.Workload != "sweep" {
		check(c.Batch >= 1 && c.Batch <= 1000, "--batch %d outside 1-1000", c.Batch)
	}
	switch c.Workload {
	case "steady", "sweep":
		check(c.Duration > 0 && c.Duration <= time.Hour, "--duration %v outside (0, 1h]", c.Duration)
		check(c.Warmup >= 0 && c.Warmup <= 10*time.Minute, "--warmup %v outside [0, 10m]", c.Warmup)
	}
	// A SendBatch is one request, and nodes take at most
	// client.MaxRequestBytes per request (each message adds a dedup key and
	// a few bytes of framing to its body).
	if c.SendBatch > 1 {
		check(c.SendBatch*(c.Size+sendOverhead) <= client.MaxRequestBytes,
			"--send-batch %d of --size %d bytes is over the %d MiB a request may hold: lower one of them", c.SendBatch, c.Size, client.MaxRequestBytes>>20)
	}
	switch c.Workload {
	case "steady":
		check(c.Inflight >= 1 && c.Inflight <= 4096, "--inflight %d outside 1-4096", c.Inflight)
		check(c.SendBatch >= 1 && c.SendBatch <= 1000, "--send-batch %d outside 1-1000", c.SendBatch)
		check(c.SendBatch <= c.Inflight && c.Inflight%max(c.SendBatch, 1) == 0, "--send-batch %d must divide --inflight %d", c.SendBatch, c.Inflight)
		check(c.Rate >= 0, "--rate %v is negative", c.Rate)
		check(c.SendMode == "sync" || c.SendMode == "async", "--send-mode %q: want sync or async", c.SendMode)
		check(c.SendMode != "async" || c.SendBatch == 1, "--send-mode async sends one message per call: --send-batch must be 1, not %d", c.SendBatch)
	case "mix":
		check(c.Messages >= 20 && c.Messages <= 1_000_000, "--messages %d outside 20-1000000", c.Messages)
		check(c.Visibility >= 100*time.Millisecond && c.Visibility <= time.Minute, "--visibility %v outside 100ms-1m", c.Visibility)
		check(c.MaxReceives >= 2 && c.MaxReceives <= 100, "--max-receives %d outside 2-100 (flapping needs a second delivery)", c.MaxReceives)
	case "backlog", "scheduled":
		check(c.Backlog >= 0 && c.Backlog <= maxBacklog, "--backlog %d outside 0-%d", c.Backlog, maxBacklog)
		check(c.SendBatch >= 1 && c.SendBatch <= 1000, "--send-batch %d outside 1-1000", c.SendBatch)
		check(c.Inflight >= 1 && c.Inflight <= 256, "--inflight %d outside 1-256", c.Inflight)
		if c.Workload == "scheduled" {
			check(c.Scheduled >= 1 && c.Scheduled <= 1_000_000, "--scheduled %d outside 1-1000000", c.Scheduled)
			check(c.Due >= time.Second && c.Due <= 10*time.Minute, "--due %v outside 1s-10m", c.Due)
			check(c.Duration > 0 && c.Duration <= time.Hour, "--duration %v outside (0, 1h]", c.Duration)
			check(c.ChurnRate >= 0, "--churn-rate %v is negative", c.ChurnRate)
		}
	case "overload":
		c.validateOverload(check)
	case "topic":
		c.validateTopic(check)
	case "sweep":
		check(len(c.Concurrency) > 0, "--concurrency: need a comma-separated list of integers")
		check(len(c.Batches) > 0, "--batches: need a comma-separated list of integers")
		for _, n := range c.Concurrency {
			check(n >= 1 && n <= 4096, "--concurrency %d outside 1-4096", n)
		}
		for _, b := range c.Batches {
			check(b >= 1 && b <= 1000, "--batches %d outside 1-1000", b)
		}
	}
	return errors.Join(errs...)
}

// maxTenantPrefix leaves room in a tenant name (at most 64 characters) for
// the "-a-" and the run's nine digits that make each run's tenants its own.
const maxTenantPrefix = 48

func (c config) validateOverload(check func(bool, string, ...any)) {
	check(c.Ceiling >= 0, "--ceiling %v is negative", c.Ceiling)
	if c.Ceiling == 0 {
		check(c.CeilingDuration > 0 && c.CeilingDuration <= 10*time.Minute, "--ceiling-duration %v outside (0, 10m]", c.CeilingDuration)
	}
	check(c.PhaseDuration > 0 && c.PhaseDuration <= time.Hour, "--phase-duration %v outside (0, 1h]", c.PhaseDuration)
	check(c.Warmup >= 0 && c.Warmup <= 10*time.Minute, "--warmup %v outside [0, 10m]", c.Warmup)
	check(c.Inflight >= 1 && c.Inflight <= 4096, "--inflight %d outside 1-4096", c.Inflight)
	check(c.SendMode == "sync" || c.SendMode == "async", "--send-mode %q: want sync or async", c.SendMode)
	check(c.BShare > 0 && c.BShare < 1, "--b-share %v outside (0, 1)", c.BShare)
	check(c.BProducers >= 1 && c.BProducers <= 1024, "--b-producers %d outside 1-1024", c.BProducers)
	check(c.BInflight >= 1 && c.BInflight <= 4096, "--b-inflight %d outside 1-4096", c.BInflight)
	check(c.BConsumers >= 1 && c.BConsumers <= 1024, "--b-consumers %d outside 1-1024", c.BConsumers)
	check(c.BBatch >= 1 && c.BBatch <= 1000, "--b-batch %d outside 1-1000", c.BBatch)
	check(c.AFactor > 0 && c.AFactor <= 1000, "--a-factor %v outside (0, 1000]", c.AFactor)
	check(c.AProducers >= 1 && c.AProducers <= 1024, "--a-producers %d outside 1-1024", c.AProducers)
	check(c.AInflight >= 1 && c.AInflight <= 4096, "--a-inflight %d outside 1-4096", c.AInflight)
	check(c.ASendBatch >= 1 && c.ASendBatch <= 1000, "--a-send-batch %d outside 1-1000", c.ASendBatch)
	check(c.ASendBatch*(c.Size+sendOverhead) <= client.MaxRequestBytes,
		"--a-send-batch %d of --size %d bytes is over the %d MiB a request may hold: lower one of them", c.ASendBatch, c.Size, client.MaxRequestBytes>>20)
	check(c.ASendRate <= math.MaxUint32, "--a-send-rate %d above %d", c.ASendRate, uint64(math.MaxUint32))
	check(c.ASendBurst <= math.MaxUint32, "--a-send-burst %d above %d", c.ASendBurst, uint64(math.MaxUint32))
	_, err := parseBytes(c.AMaxBytes)
	check(err == nil, "--a-max-bytes: %v", err)
	_, err = parseBytes(c.Budget)
	check(err == nil, "--budget: %v", err)
	// Each run makes tenants named after --queue: a tenant name is
	// [a-z0-9_-], starting with a letter or a digit.
	check(validTenantPrefix(c.Queue), "--queue %q: the overload workload names its tenants after it: want 1-%d of [a-z0-9_-], starting with a letter or a digit", c.Queue, maxTenantPrefix)
}

func validTenantPrefix(s string) bool {
	if s == "" || len(s) > maxTenantPrefix {
		return false
	}
	for i, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && (r == '_' || r == '-')) {
			return false
		}
	}
	return true
}

// aQuotas is tenant A's quotas from the flags (validated: the sizes parse
// and the rates fit).
func (c config) aQuotas() client.Quotas {
	maxBytes, _ := parseBytes(c.AMaxBytes)
	return client.Quotas{SendRate: uint32(c.ASendRate), SendBurst: uint32(c.ASendBurst), MaxMessages: c.AMaxMessages,
		MaxBytes: maxBytes, MaxInFlight: c.AMaxInFlight}
}
