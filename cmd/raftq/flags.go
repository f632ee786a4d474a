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
	// TLS: the CA that signed the nodes' certificates and an optional
	// client certificate (tls.go).
	ca, cert, key string
	insecure      bool
	// token, tokenFile: an API key, or a file holding one (token.go).
	token, tokenFile string
	json             bool
	// wait is not a flag: a command that is asked to wait (receive --wait,
	// cluster status --wait) sets it, and the command's deadline is
	// --timeout plus it, so the timeout always covers the wait.
	wait time.Duration
	// waitForNodes: the wait also covers no node answering yet.
	waitForNodes bool
	// untimed is not a flag: a command that runs until it is stopped
	// (work) sets it, and --timeout then bounds only connecting.
	untimed bool
}

func newGlobals(addr string) globals { return globals{addr: addr, timeout: 10 * time.Second} }

// register adds the global flags with their current values as defaults, so
// a value given before the command survives the command's own flag set.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "comma-separated node gRPC addresses, tried in turn (env RAFTQ_ADDR)")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "deadline for the command, retries included; a --wait the command is given is added")
	fs.BoolVar(&g.json, "json", g.json, "print JSON instead of tables")
	fs.StringVar(&g.ca, "ca", g.ca, "PEM file of the CA that signed the nodes' certificates: connect with TLS (env RAFTQ_CA; default "+devCA+" when it exists)")
	fs.StringVar(&g.cert, "cert", g.cert, "PEM file of a client certificate to present (env RAFTQ_CERT)")
	fs.StringVar(&g.key, "key", g.key, "PEM file of the client certificate's key (env RAFTQ_KEY)")
	fs.BoolVar(&g.insecure, "insecure", g.insecure, "connect in plaintext, to nodes run with --insecure (env RAFTQ_INSECURE)")
	fs.StringVar(&g.token, "token", g.token, "API key to call with (raftq keys create makes one; env RAFTQ_TOKEN); prefer --token-file, which keeps it out of the process list")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "file holding the API key on its first line (env RAFTQ_TOKEN_FILE)")
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

// newFlagSet makes a flag set that reports errors instead of exiting and
// prints no usage of its own: the caller prints it once, to stdout for
// --help and as one line to stderr for a mistake.
func newFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {}
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

// given reports whether the flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
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

// durationWithin checks a duration flag that was given: positive (its
// zero would silently mean a default, so it is refused) or, if zeroOK,
// not negative; and at most max. unset says what leaving the flag out
// does.
func durationWithin(name string, d, max time.Duration, zeroOK bool, unset string) error {
	switch {
	case d < 0:
		return usagef("--%s %v is negative", name, d)
	case d == 0 && !zeroOK:
		return usagef("--%s 0s: give a positive duration (leave the flag out for %s)", name, unset)
	case d > max:
		return usagef("--%s %v is above the limit %v", name, d, max)
	}
	return nil
}

// policyFlag is one queue policy flag: its help, what leaving it out
// means on create, and whether 0 is a value of its own (for the others,
// 0 would silently mean the default and is refused).
type policyFlag struct {
	name, help, createDefault string
	zeroOK                    bool
}

var policyFlagList = []policyFlag{
	{"fifo", "FIFO queue: per-group order, one in flight per group, a group on every message; fixed at create", "false", true},
	{"visibility", "default lease length", "30s", false},
	{"max-receives", "deliveries before the message is dead-lettered", "10", false},
	{"backoff-base", "nack backoff base", "1s", false},
	{"backoff-max", "nack backoff cap", "5m", false},
	{"dedup-window", "how long a dedup key is remembered", "5m", false},
	{"retention", "how long a ready or delayed message is kept", "96h", false},
	{"dead-retention", "how long a dead message is kept before it is discarded (0: until redriven or discarded)", "0", true},
	{"delay", "default delay of new messages", "0s", true},
	{"max-size", "largest message body in bytes", "and cap 262144", false},
	{"max-messages-per-shard", "most live (ready, delayed, leased) messages per shard; sends past it fail", "0: no limit", true},
	{"max-bytes-per-shard", "most live message body bytes per shard, at least --max-size; sends past it fail", "0: no limit", true},
	{"completed-retention", "how long an acked record and its result are kept for message get/wait", "1h", false},
	{"completed-max-bytes-per-shard", "most ack result bytes kept per shard; the oldest acked records go first (0: 64 MiB; else at least 65536)", "0: 64 MiB", true},
}

// policyFlags are the queue policy flags of queue create and update.
type policyFlags struct {
	fifo                                                         bool
	visibility, backoffBase, backoffMax, dedup, retention, delay time.Duration
	deadRetention                                                time.Duration
	maxReceives, maxSize                                         uint
	maxMessagesPerShard, maxBytesPerShard                        uint64
	completedRetention                                           time.Duration
	completedMaxBytes                                            uint64
}

// register adds the flags; update's help says a flag left out keeps the
// queue's value, create's says what the server defaults to.
func (p *policyFlags) register(fs *flag.FlagSet, update bool) { p.registerExcept(fs, update, nil) }

// registerExcept adds the flags but those in skip: a subscription's mode,
// dedup window and size limit are its topic's.
func (p *policyFlags) registerExcept(fs *flag.FlagSet, update bool, skip map[string]bool) {
	help := map[string]string{}
	for _, f := range policyFlagList {
		switch {
		case update && f.name == "fifo":
			help[f.name] = "FIFO queue (a queue's mode cannot change: only its current mode is accepted)"
		case update:
			help[f.name] = f.help + " (unchanged if not given)"
		default:
			help[f.name] = f.help + " (default " + f.createDefault + ")"
		}
	}
	for _, r := range []struct {
		name string
		add  func(name, usage string)
	}{
		{"fifo", func(n, u string) { fs.BoolVar(&p.fifo, n, false, u) }},
		{"visibility", func(n, u string) { fs.DurationVar(&p.visibility, n, 0, u) }},
		{"max-receives", func(n, u string) { fs.UintVar(&p.maxReceives, n, 0, u) }},
		{"backoff-base", func(n, u string) { fs.DurationVar(&p.backoffBase, n, 0, u) }},
		{"backoff-max", func(n, u string) { fs.DurationVar(&p.backoffMax, n, 0, u) }},
		{"dedup-window", func(n, u string) { fs.DurationVar(&p.dedup, n, 0, u) }},
		{"retention", func(n, u string) { fs.DurationVar(&p.retention, n, 0, u) }},
		{"dead-retention", func(n, u string) { fs.DurationVar(&p.deadRetention, n, 0, u) }},
		{"delay", func(n, u string) { fs.DurationVar(&p.delay, n, 0, u) }},
		{"max-size", func(n, u string) { fs.UintVar(&p.maxSize, n, 0, u) }},
		{"max-messages-per-shard", func(n, u string) { fs.Uint64Var(&p.maxMessagesPerShard, n, 0, u) }},
		{"max-bytes-per-shard", func(n, u string) { fs.Uint64Var(&p.maxBytesPerShard, n, 0, u) }},
		{"completed-retention", func(n, u string) { fs.DurationVar(&p.completedRetention, n, 0, u) }},
		{"completed-max-bytes-per-shard", func(n, u string) { fs.Uint64Var(&p.completedMaxBytes, n, 0, u) }},
	} {
		if !skip[r.name] {
			r.add(r.name, help[r.name])
		}
	}
}

// check validates the flags given, in flag names and durations, before any
// call: a server's refusal would name proto fields in milliseconds.
func (p *policyFlags) check(fs *flag.FlagSet, update bool) error {
	unset := func(f policyFlag) string {
		if update {
			return "the queue's current value"
		}
		return "the default " + strings.TrimPrefix(f.createDefault, "and cap ")
	}
	durations := map[string]struct {
		d, max time.Duration
	}{
		"visibility": {p.visibility, client.MaxVisibility}, "backoff-base": {p.backoffBase, client.MaxDelay},
		"backoff-max": {p.backoffMax, client.MaxDelay}, "dedup-window": {p.dedup, client.MaxRetention},
		"retention": {p.retention, client.MaxRetention}, "delay": {p.delay, client.MaxDelay},
		"completed-retention": {p.completedRetention, client.MaxRetention},
		"dead-retention":      {p.deadRetention, client.MaxDeadRetention},
	}
	for _, f := range policyFlagList {
		if !given(fs, f.name) {
			continue
		}
		if v, ok := durations[f.name]; ok {
			if err := durationWithin(f.name, v.d, v.max, f.zeroOK, unset(f)); err != nil {
				return err
			}
		}
	}
	counts := []struct {
		name string
		v    uint
		max  uint
	}{{"max-receives", p.maxReceives, client.MaxReceives}, {"max-size", p.maxSize, client.MaxBodyBytes}}
	for _, c := range counts {
		if !given(fs, c.name) {
			continue
		}
		for _, f := range policyFlagList {
			if f.name == c.name && c.v == 0 {
				return usagef("--%s 0: give at least 1 (leave the flag out for %s)", c.name, unset(f))
			}
		}
		if c.v > c.max {
			return usagef("--%s %d is above the limit %d", c.name, c.v, c.max)
		}
	}
	if n := p.completedMaxBytes; given(fs, "completed-max-bytes-per-shard") && n != 0 && n < client.MaxResultBytes {
		return usagef("--completed-max-bytes-per-shard %d is below one largest result, %d (0 for the default 64 MiB)", n, client.MaxResultBytes)
	}
	return nil
}

// apply copies the flags that were set on the command line onto o (all of
// them for create, which starts from zero). check has passed.
func (p *policyFlags) apply(fs *flag.FlagSet, o *client.QueueOptions) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "fifo":
			o.FIFO = p.fifo
		case "visibility":
			o.Visibility = p.visibility
		case "max-receives":
			o.MaxReceives = uint32(p.maxReceives)
		case "backoff-base":
			o.BackoffBase = p.backoffBase
		case "backoff-max":
			o.BackoffMax = p.backoffMax
		case "dedup-window":
			o.DedupWindow = p.dedup
		case "retention":
			o.Retention = p.retention
		case "dead-retention":
			o.DeadRetention = p.deadRetention
		case "delay":
			o.Delay = p.delay
		case "max-size":
			o.MaxMessageBytes = uint32(p.maxSize)
		case "max-messages-per-shard":
			o.MaxMessagesPerShard = p.maxMessagesPerShard
		case "max-bytes-per-shard":
			o.MaxBytesPerShard = p.maxBytesPerShard
		case "completed-retention":
			o.CompletedRetention = p.completedRetention
		case "completed-max-bytes-per-shard":
			o.CompletedMaxBytesPerShard = p.completedMaxBytes
		}
	})
}
