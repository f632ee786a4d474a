package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
)

// globals are the flags every command accepts, before or after its name.
type globals struct {
	addr    string
	timeout time.Duration
	json    bool
}

func newGlobals(addr string) globals { return globals{addr: addr, timeout: 10 * time.Second} }

// register adds the global flags with their current values as defaults, so
// a value given before the command survives the command's own flag set.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "comma-separated node gRPC addresses (env RAFTQ_ADDR)")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "deadline for the whole command, retries included")
	fs.BoolVar(&g.json, "json", g.json, "print JSON instead of tables")
}

func (g *globals) seeds() []string {
	var out []string
	for _, s := range strings.Split(g.addr, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// newFlagSet makes a flag set that reports errors instead of exiting.
func newFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

// parseInterleaved parses flags that may appear before, between or after
// positional arguments ("raftq send q body --group g"); "--" ends flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// listFlag collects comma-separated values over repeated flags.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// mapFlag collects repeated k=v pairs.
type mapFlag map[string]string

func (m mapFlag) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func (m mapFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	m[k] = val
	return nil
}

// policyFlags are the queue policy flags of queue create and update.
type policyFlags struct {
	fifo                                                         bool
	visibility, backoffBase, backoffMax, dedup, retention, delay time.Duration
	maxReceives, maxSize                                         uint
	maxMessagesPerShard, maxBytesPerShard                        uint64
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.fifo, "fifo", false, "FIFO queue: per-group order, one in flight per group")
	fs.DurationVar(&p.visibility, "visibility", 0, "default lease length (server default 30s)")
	fs.UintVar(&p.maxReceives, "max-receives", 0, "deliveries before the message is dead-lettered (default 10)")
	fs.DurationVar(&p.backoffBase, "backoff-base", 0, "nack backoff base (default 1s)")
	fs.DurationVar(&p.backoffMax, "backoff-max", 0, "nack backoff cap (default 5m)")
	fs.DurationVar(&p.dedup, "dedup-window", 0, "dedup key window (default 5m)")
	fs.DurationVar(&p.retention, "retention", 0, "ready/delayed message retention (default 96h)")
	fs.DurationVar(&p.delay, "delay", 0, "default delay of new messages")
	fs.UintVar(&p.maxSize, "max-size", 0, "largest message body in bytes (default and cap 262144)")
	fs.Uint64Var(&p.maxMessagesPerShard, "max-messages-per-shard", 0, "most live (ready, delayed, leased) messages per shard; sends past it fail (default 0: no limit)")
	fs.Uint64Var(&p.maxBytesPerShard, "max-bytes-per-shard", 0, "most live message body bytes per shard, at least --max-size; sends past it fail (default 0: no limit)")
}

// apply copies the flags that were set on the command line onto o (all of
// them for create, which starts from zero).
func (p *policyFlags) apply(fs *flag.FlagSet, o *client.QueueOptions) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "fifo":
			o.FIFO = p.fifo
		case "visibility":
			o.Visibility = p.visibility
		case "max-receives":
			o.MaxReceives, err = toU32(f.Name, p.maxReceives, err)
		case "backoff-base":
			o.BackoffBase = p.backoffBase
		case "backoff-max":
			o.BackoffMax = p.backoffMax
		case "dedup-window":
			o.DedupWindow = p.dedup
		case "retention":
			o.Retention = p.retention
		case "delay":
			o.Delay = p.delay
		case "max-size":
			o.MaxMessageBytes, err = toU32(f.Name, p.maxSize, err)
		case "max-messages-per-shard":
			o.MaxMessagesPerShard = p.maxMessagesPerShard
		case "max-bytes-per-shard":
			o.MaxBytesPerShard = p.maxBytesPerShard
		}
	})
	if err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{"visibility": o.Visibility, "backoff-base": o.BackoffBase, "backoff-max": o.BackoffMax, "dedup-window": o.DedupWindow, "retention": o.Retention, "delay": o.Delay} {
		if d < 0 {
			return fmt.Errorf("--%s %v is negative", name, d)
		}
	}
	return nil
}

func toU32(name string, v uint, prev error) (uint32, error) {
	if prev != nil {
		return 0, prev
	}
	if v > 1<<32-1 {
		return 0, fmt.Errorf("--%s %d is too large", name, v)
	}
	return uint32(v), nil
}
