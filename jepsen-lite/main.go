// Command jepsen-lite runs a real raftq cluster in private network
// namespaces, drives concurrent clients against it while a nemesis injects
// faults, records a Jepsen-style history and checks it. It exits non-zero
// on any violation. See docs/jepsen.md.
//
//	go run ./jepsen-lite --workload queue --nemesis partition,kill --time 60s --seed 7
//	go run ./jepsen-lite --check jepsen-lite/runs/<dir>/history.jsonl
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/raftq/raftq/internal/version"
	"github.com/raftq/raftq/jepsen-lite/nemesis"
	"github.com/raftq/raftq/jepsen-lite/workload"
)

type options struct {
	backend   string
	workloads []string
	nemeses   []string
	duration  time.Duration
	seed      uint64
	nodes     int
	spares    int
	shards    int
	runsDir   string
	keepAll   bool
	bin       string
	check     string
	fifo      string
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("jepsen-lite", flag.ContinueOnError)
	workloads := fs.String("workload", "queue", "comma-separated workloads run together, each on its own queues: queue, fifo, lease, quota, cron, fanout, or all")
	faults := fs.String("nemesis", "partition,kill", "comma-separated faults: partition, kill, pause, clock, restart, damage, membership, reshard, all, or none")
	fs.DurationVar(&o.duration, "time", 60*time.Second, "how long clients run under faults (the final phase follows)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the fault schedule and client choices (0: from the clock; printed for replay)")
	fs.StringVar(&o.backend, "backend", "local", "where nodes run: local (network namespaces, needs root) or compose (docker/compose.yaml; no clock nemesis)")
	fs.IntVar(&o.nodes, "nodes", 3, "cluster size at the start (3 or 5)")
	fs.IntVar(&o.spares, "spares", 2, "spare node slots for the membership nemesis (local backend; unused without it)")
	fs.IntVar(&o.shards, "shards", 4, fmt.Sprintf("data shards at the start (with the reshard nemesis: %d unless given)", nemesis.ReshardStartShards))
	fs.StringVar(&o.runsDir, "runs", "jepsen-lite/runs", "directory for run directories (history, report, node logs)")
	fs.BoolVar(&o.keepAll, "keep-passed", false, "keep the run directory of a run that passed too (by default only a failed or unfinished run keeps its own: each holds its nodes' data)")
	fs.StringVar(&o.bin, "bin", "", "raftq-node binary (default: build ./cmd/node into the run directory)")
	fs.StringVar(&o.check, "check", "", "only check this history file and exit")
	fs.StringVar(&o.fifo, "fifo-queues", "jepsen-fifo", "with --check: queues to judge for per-group order")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.workloads = list(*workloads, workload.Names())
	o.nemeses = list(*faults, slices.Clone(nemesis.Kinds))
	switch o.backend {
	case "local":
		if !slices.Contains(o.nemeses, "membership") {
			o.spares = 0
		} else if o.spares < 1 {
			return nil, errors.New("--nemesis membership needs --spares of at least 1")
		}
		if o.nodes+o.spares > 9 {
			return nil, fmt.Errorf("--nodes %d plus --spares %d: at most 9 node slots", o.nodes, o.spares)
		}
	case "compose":
		// The compose file does not pass RAFTQ_CLOCK_OFFSET through, so
		// the compose backend has no clock skew, the nodes' files are in
		// docker volumes the harness does not reach, so no damage, and it
		// has no spare nodes, so no membership changes; "all" means the
		// rest (reshard included: growing the shard count needs no
		// spare node).
		o.spares = 0
		if *faults == "all" {
			o.nemeses = []string{"partition", "kill", "pause", "restart", "reshard"}
		}
		for _, k := range o.nemeses {
			switch k {
			case "clock":
				return nil, errors.New("--backend compose has no clock nemesis (docker/compose.yaml does not pass RAFTQ_CLOCK_OFFSET through)")
			case "damage":
				return nil, errors.New("--backend compose has no damage nemesis (the nodes' files are in docker volumes)")
			case "membership":
				return nil, errors.New("--backend compose has no membership nemesis (docker/compose.yaml has no spare nodes)")
			}
		}
	default:
		return nil, fmt.Errorf("--backend %q: local or compose", o.backend)
	}
	if slices.Contains(o.nemeses, "reshard") {
		// The reshard nemesis grows the count by one at a time up to
		// nemesis.ReshardCap: the default 4 shards on 3 nodes leave it
		// little room, so it starts with fewer unless told.
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "shards" })
		if !given {
			o.shards = nemesis.ReshardStartShards
		}
		if top := nemesis.ReshardCap(o.shards, o.nodes); top <= o.shards {
			return nil, fmt.Errorf("--nemesis reshard: --shards %d on %d nodes leaves no room to grow (at most %d shards: %d per node)", o.shards, o.nodes, top, nemesis.MaxShardsPerMember)
		}
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano() % 1_000_000_000)
	}
	if o.duration > 20*time.Minute {
		return nil, errors.New("--time above 20m: the dedup checker assumes one 30 min dedup window per run")
	}
	return o, nil
}

func list(s string, all []string) []string {
	switch s {
	case "all":
		return all
	case "none", "":
		return nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func main() {
	if version.Requested(os.Args[1:]) {
		printVersion(os.Stdout)
		return
	}
	os.Exit(realMain())
}

func printVersion(w io.Writer) { version.Print(w, "jepsen-lite") }

func realMain() int {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "jepsen-lite:", err)
		return 2
	}
	if o.check != "" {
		return checkOnly(o)
	}
	// The first signal cancels the run and lets cleanup finish; the
	// cleanup itself runs on a context that signals do not cancel.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := runAll(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jepsen-lite: %v (seed %d)\n", err, o.seed)
		return 2
	}
	if !ok {
		return 1
	}
	return 0
}

// retainRun removes the directory of a run that passed unless keepAll:
// each holds its nodes' data, and a make test's passing runs add up to
// about a gigabyte. A failed or unfinished run keeps its directory for
// the report, the history and the node logs.
func retainRun(dir string, passed, keepAll bool) {
	if !passed || keepAll {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		logf("passed; could not remove %s: %v", dir, err)
		return
	}
	logf("passed: removed %s (--keep-passed keeps it)", dir)
}
