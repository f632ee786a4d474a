package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/worker"
)

// maxWorkConcurrency caps --concurrency: one receive asks for at most this
// many messages (client.ReceiveOptions.Max).
const maxWorkConcurrency = 1000

// maxJobTimeout caps --job-timeout. The lease is renewed while a command
// runs, so a long job is fine; beyond a week a limit is a typo.
const maxJobTimeout = 7 * 24 * time.Hour

// workCommand is "raftq work QUEUE -- COMMAND [ARG...]": a worker
// (package worker) whose handler runs COMMAND once per message (job.go).
// It runs until SIGINT or SIGTERM, then lets running commands finish for
// up to --drain.
func workCommand() command {
	return command{"work", "QUEUE -- COMMAND [ARG...]", "run COMMAND per message: body on stdin, exit 0 acks, other exits nack with stderr's tail", func(a *app, fs *flag.FlagSet) binder {
		conc := fs.Int("concurrency", 1, fmt.Sprintf("commands running at once, 1-%d", maxWorkConcurrency))
		timeout := fs.Duration("job-timeout", 0, `kill a command's process group after this long and nack its message with "timeout" (default: no limit)`)
		vis := fs.Duration("visibility", 0, "lease length, renewed while the command runs (default 30s)")
		resultOut := fs.Bool("result-from-stdout", false, "keep the command's stdout (at most 64 KiB) as the job's result instead of printing it")
		drain := fs.Duration("drain", 30*time.Second, "after SIGINT or SIGTERM, how long running commands may finish before they are killed and their messages handed back")
		return func(pos []string) (action, error) {
			if len(pos) < 2 || pos[0] == "" || pos[1] == "" {
				return nil, usagef("want QUEUE -- COMMAND [ARG...], got %d argument(s)", len(pos))
			}
			if *conc < 1 || *conc > maxWorkConcurrency {
				return nil, usagef("--concurrency %d outside 1-%d", *conc, maxWorkConcurrency)
			}
			if given(fs, "job-timeout") {
				if err := durationWithin("job-timeout", *timeout, maxJobTimeout, false, "no limit"); err != nil {
					return nil, err
				}
			}
			if given(fs, "visibility") {
				if err := durationWithin("visibility", *vis, client.MaxVisibility, false, "30s"); err != nil {
					return nil, err
				}
				if *vis < 3*time.Millisecond {
					return nil, usagef("--visibility %v is below 3ms: the lease is renewed every third of it", *vis)
				}
			}
			if err := durationWithin("drain", *drain, 24*time.Hour, true, ""); err != nil {
				return nil, err
			}
			// A command that cannot start would nack every message until
			// each is dead-lettered: refuse it here instead.
			if _, err := exec.LookPath(pos[1]); err != nil {
				return nil, usagef("COMMAND %q: %v", pos[1], err)
			}
			a.g.untimed = true
			j := &jobRunner{
				queue: pos[0], argv: pos[1:], timeout: *timeout,
				stdout: &lockedWriter{w: a.stdout}, stderr: &lockedWriter{w: a.stderr},
				resultFromStdout: *resultOut,
			}
			opts := worker.Options{
				// --drain 0s kills at once; the worker reads 0 as its default.
				Concurrency: *conc, Visibility: *vis, DrainTimeout: max(*drain, time.Millisecond),
				Logger: slog.New(slog.NewTextHandler(j.stderr, nil)),
				// Settled reports every outcome, errors included.
				OnError: func(context.Context, *worker.Message, error) {},
				Hooks:   worker.Hooks{Settled: j.settled},
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				return j.work(ctx, c, opts)
			}, nil
		}
	}, false}
}

// work runs the worker until ctx ends or SIGINT or SIGTERM arrives.
func (j *jobRunner) work(ctx context.Context, c *client.Client, opts worker.Options) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := worker.New(c, j.queue, opts)
	if err != nil {
		return usagef("%v", err)
	}
	w.Default(j.handle)
	fmt.Fprintf(j.stderr, "raftq work: running %s for each message of %q, %d at a time; SIGINT or SIGTERM stops\n",
		strings.Join(j.argv, " "), j.queue, opts.Concurrency)
	if err := w.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintln(j.stderr, "raftq work: stopped")
	return nil
}

// settled prints one line per message on stderr.
func (j *jobRunner) settled(m *worker.Message, s worker.Settlement) {
	line := fmt.Sprintf("raftq work: %s %s after %v", m.ID, s.Outcome, s.Took.Round(time.Millisecond))
	if s.Err != nil && !errors.Is(s.Err, worker.ErrShutdown) {
		line += ": " + strings.ReplaceAll(s.Err.Error(), "\n", " | ")
	}
	if s.SettleErr != nil {
		line += " (" + s.SettleErr.Error() + ")"
	}
	fmt.Fprintln(j.stderr, line)
}

// lockedWriter serializes the writes of commands running at once, so
// each write reaches the terminal whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
