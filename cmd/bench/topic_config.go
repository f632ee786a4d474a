package main

import (
	"flag"
	"net/url"
	"strings"
	"time"
)

// Bounds of the topic workload: a cell runs --consumers goroutines per
// subscription, so the subscription count bounds the goroutines too.
const (
	maxTopicSubs      = 256
	maxTopicConsumers = 4096 // consumers per subscription x subscriptions
)

// registerTopic registers the topic workload's flags. Producers are the
// headline's (16 x 256 in flight) but asynchronous by default, the way a
// publisher keeps a window of publishes outstanding; --consumers is per
// subscription.
func (c *config) registerTopic(fs *flag.FlagSet, load func(producers, consumers, batch int), nodes func()) {
	load(16, 4, 256)
	fs.Lookup("consumers").Usage = "consumer goroutines per subscription"
	nodes()
	fs.DurationVar(&c.Duration, "duration", 20*time.Second, "measured duration (not with --hold)")
	fs.DurationVar(&c.Warmup, "warmup", 3*time.Second, "warmup before measuring, not counted (not with --hold)")
	fs.IntVar(&c.Inflight, "inflight", 256, "publishes each producer keeps outstanding (1: synchronous)")
	fs.StringVar(&c.SendMode, "send-mode", "async", "async: one goroutine per producer keeps --inflight SendAsync calls outstanding; sync: --inflight goroutines per producer, each blocked in Send")
	fs.Float64Var(&c.Rate, "rate", 0, "cap on the total publish rate in msgs/s (0: as fast as the cluster takes them)")
	fs.Int64Var(&c.MaxBacklog, "max-backlog", 20_000, "hold the producers while more than this many published copies wait for their consumers, so the window measures what the consumers keep up with rather than a backlog growing without end (0: never hold; not with --hold)")
	fs.IntVar(&c.Hold, "hold", 0, "publish this many messages with every consumer stopped, read node memory (heap from --metrics, RSS from --pids or --metrics), then drain: memory per held message (0: the throughput run; at most 5,000,000)")
	fs.StringVar(&c.Pprof, "pprof", "", "comma-separated pprof base URLs of the nodes (raftq-node --pprof-bind, e.g. http://127.0.0.1:7601), in --metrics order: with --hold, force a GC on each node before each memory reading, so the heap read is the live heap")
	c.SendBatch = 1
}

func (c config) validateTopic(check func(bool, string, ...any)) {
	check(len(c.Subs) > 0, "--subs: need a comma-separated list of integers")
	most := 0
	for _, n := range c.Subs {
		check(n >= 1 && n <= maxTopicSubs, "--subs %d outside 1-%d", n, maxTopicSubs)
		most = max(most, n)
	}
	check(c.Consumers*most <= maxTopicConsumers, "--consumers %d per subscription x %d subscriptions is over %d consumers", c.Consumers, most, maxTopicConsumers)
	check(c.Inflight >= 1 && c.Inflight <= 4096, "--inflight %d outside 1-4096", c.Inflight)
	check(c.SendMode == "sync" || c.SendMode == "async", "--send-mode %q: want sync or async", c.SendMode)
	check(c.Rate >= 0, "--rate %v is negative", c.Rate)
	check(c.Hold >= 0 && c.Hold <= maxBacklog, "--hold %d outside 0-%d", c.Hold, maxBacklog)
	check(c.MaxBacklog >= 0 && c.MaxBacklog <= 10*maxBacklog, "--max-backlog %d outside 0-%d", c.MaxBacklog, 10*maxBacklog)
	if c.Hold == 0 {
		check(c.Duration > 0 && c.Duration <= time.Hour, "--duration %v outside (0, 1h]", c.Duration)
		check(c.Warmup >= 0 && c.Warmup <= 10*time.Minute, "--warmup %v outside [0, 10m]", c.Warmup)
	}
	pprof := splitList(c.Pprof)
	for _, u := range pprof {
		r, err := url.Parse(u)
		check(err == nil && (r.Scheme == "http" || r.Scheme == "https") && r.Host != "", "--pprof %q: want http://HOST:PORT of a node's --pprof-bind", u)
	}
	if len(pprof) > 0 {
		check(c.Hold > 0, "--pprof forces GCs for --hold's memory readings: give --hold too")
		check(len(pprof) == len(splitList(c.Metrics)), "--pprof has %d URLs, --metrics %d: give one per node, in the same order", len(pprof), len(splitList(c.Metrics)))
	}
}

// splitList splits a comma-separated flag, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
