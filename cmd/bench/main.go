// Command raftq-bench is raftq's load generator. Each workload is
// deterministic from --seed; every message carries its producer id,
// sequence number and send time, so a ledger detects loss and duplication
// exactly. Results print as a table, or as one JSON object with --json.
//
//	raftq-bench steady --addr 127.0.0.1:7101 --producers 16 --consumers 8 \
//	    --size 1024 --duration 20s --inflight 256 --batch 256 --json
//
// See docs/benchmarks.md for the workloads and measured figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/raftq/raftq/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code := report(err, os.Stderr); code != 0 {
		os.Exit(code)
	}
}

// report prints what went wrong and returns the exit status: 0 for success
// or help on request, 1 for a run whose checks failed, 2 for bad input or a
// run that could not be made. Only the bare errUsage stays silent: the usage
// text was printed already; a flag value that fails validation is named.
func report(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFailed):
		fmt.Fprintln(stderr, "raftq-bench:", err)
		return 1
	case err == errUsage:
		return 2
	default:
		fmt.Fprintln(stderr, "raftq-bench:", err)
		return 2
	}
}

// errFailed marks a run that completed but failed its checks (loss, a DLQ
// count off): the result is printed, and the exit status says it failed.
var errFailed = errors.New("check failed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if version.Requested(args) {
		version.Print(stdout, "raftq-bench")
		return nil
	}
	cfg, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if cfg.CPUProfile != "" {
		stopProfile, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	var res result
	switch cfg.Workload {
	case "steady":
		res, err = runSteady(ctx, cfg, stderr)
	case "mix":
		res, err = runMix(ctx, cfg, stderr)
	case "backlog":
		res, err = runBacklog(ctx, cfg, stderr)
	case "scheduled":
		res, err = runScheduled(ctx, cfg, stderr)
	case "sweep":
		res, err = runSweep(ctx, cfg, stderr)
	case "overload":
		res, err = runOverload(ctx, cfg, stderr)
	case "topic":
		res, err = runTopic(ctx, cfg, stderr)
	}
	if res != nil {
		if perr := printResult(stdout, res, cfg.JSON); perr != nil {
			return errors.Join(err, perr)
		}
	}
	return err
}
