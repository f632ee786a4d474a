package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

func TestTopicFlags(t *testing.T) {
	c := mustParse(t, "topic")
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	// The headline's producers, asynchronous, one message per call; a
	// subscription's consumers take the headline's batches.
	if c.Producers != 16 || c.Inflight != 256 || c.SendMode != "async" || c.SendBatch != 1 || c.Size != 1024 ||
		c.Consumers != 4 || c.Batch != 256 || c.Hold != 0 || c.MaxBacklog != 20_000 || !slices.Equal(c.Subs, []int{1}) {
		t.Errorf("defaults %+v", c)
	}
	c = mustParse(t, strings.Fields("topic --subs 1,4,16 --hold 100000 --pprof http://127.0.0.1:7601,http://127.0.0.1:7602,http://127.0.0.1:7603")...)
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Subs, []int{1, 4, 16}) || c.Hold != 100000 {
		t.Errorf("parsed --subs %v --hold %d", c.Subs, c.Hold)
	}

	cases := []struct {
		args string
		want string // substring of the error; "" = valid
	}{
		{"topic --subs 16 --consumers 8", ""},
		{"topic --subs 0", "--subs 0 outside 1-256"},
		{"topic --subs 257", "--subs 257"},
		{"topic --subs 4,x", "--subs: need a comma-separated list"},
		{"topic --subs 256 --consumers 17", "--consumers 17 per subscription x 256 subscriptions is over 4096"},
		{"topic --consumers 0", "--consumers"},
		{"topic --inflight 0", "--inflight"},
		{"topic --send-mode fast", "--send-mode"},
		{"topic --send-mode sync --inflight 1", ""},
		{"topic --rate -1", "--rate"},
		{"topic --duration 0s", "--duration"},
		{"topic --duration 0s --hold 1000", ""}, // a hold run has no window
		{"topic --warmup -1s", "--warmup"},
		{"topic --hold -1", "--hold"},
		{"topic --hold 5000001", "--hold"},
		{"topic --pprof http://127.0.0.1:7601", "--pprof forces GCs for --hold"},
		{"topic --hold 10 --pprof http://127.0.0.1:7601", "--pprof has 1 URLs, --metrics 3"},
		{"topic --hold 10 --pprof 127.0.0.1:7601 --metrics http://x/metrics", "--pprof \"127.0.0.1:7601\""},
		{"topic --hold 10 --pprof http://a:1,http://b:2 --metrics http://a/metrics,http://b/metrics", ""},
		{"topic --batch 0", "--batch"},
		{"topic --max-backlog 0", ""},
		{"topic --max-backlog -1", "--max-backlog"},
		{"topic --max-backlog 50000001", "--max-backlog"},
		{"topic --ack later", "--ack"},
	}
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			err := mustParse(t, strings.Fields(tc.args)...).validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid flags refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// A topic's ledger books one copy per subscription: a publish is lost on
// a subscription that never got it, whatever the others got, and the
// drain waits for every copy.
func TestLedgerCopies(t *testing.T) {
	l := newFanLedger(2, 3)
	for p := range 2 {
		for range 2 {
			s := l.next(p)
			l.sent(p, s, !(p == 1 && s == 1)) // 1/1: unknown outcome
		}
	}
	if got := l.outstanding(); got != 3*3 {
		t.Fatalf("outstanding %d, want 9 (3 acked publishes x 3 subscriptions)", got)
	}
	deliver := func(c int, p uint32, seq uint64) bool { return l.deliveredCopy(c, header{Producer: p, Seq: seq}) }
	for c := range 3 {
		if !deliver(c, 0, 0) {
			t.Fatalf("first delivery of 0/0 on subscription %d reported a duplicate", c)
		}
	}
	if deliver(1, 0, 0) {
		t.Error("second delivery of 0/0 on subscription 1 reported as first")
	}
	deliver(0, 0, 1)
	deliver(2, 0, 1) // 0/1 never reaches subscription 1
	deliver(0, 1, 0)
	deliver(1, 1, 0)
	deliver(2, 1, 0)
	deliver(0, 1, 1) // unknown outcome: a delivery is fine, none is not lost
	deliver(3, 0, 0) // no such subscription
	deliver(-1, 0, 0)
	deliver(0, 0, 9) // never sent
	want := tally{Acked: 3, Unknown: 1, Copies: 3, Delivered: 9, Duplicates: 1, Lost: 1, Foreign: 3}
	if got := l.tally(); got != want {
		t.Errorf("tally %+v, want %+v", got, want)
	}
	if got := l.outstanding(); got != 1 {
		t.Errorf("outstanding %d, want 1 (0/1 on subscription 1)", got)
	}
	if got := l.missing(10); !slices.Equal(got, []string{"0/1@1"}) {
		t.Errorf("missing %v, want [0/1@1]", got)
	}
	// A plain queue's ledger keeps its one-copy shape.
	if got := newLedger(1).tally().Copies; got != 0 {
		t.Errorf("plain ledger reports %d copies", got)
	}
}

// A copy delivered before its publish is acknowledged counts once the
// ack books it, as with a plain send.
func TestLedgerCopiesDeliveredBeforeAck(t *testing.T) {
	l := newFanLedger(1, 2)
	s := l.next(0)
	l.deliveredCopy(1, header{Seq: s})
	l.sent(0, s, true)
	if got := l.outstanding(); got != 1 {
		t.Fatalf("outstanding %d, want 1 (subscription 0's copy)", got)
	}
	l.deliveredCopy(0, header{Seq: s})
	if got := l.outstanding(); got != 0 {
		t.Fatalf("outstanding %d after both copies", got)
	}
}

func TestCheckDeliveries(t *testing.T) {
	l := &load{wantDeliveries: 4}
	for _, r := range []client.SendResult{
		{Deliveries: 4},
		{Deliveries: 3},                     // short
		{Deliveries: 0},                     // short
		{Deliveries: 5},                     // more subscriptions than the run made: counted too
		{Deduplicated: true, Deliveries: 0}, // a repeat reaches none by design
	} {
		l.checkDeliveries(r)
	}
	if got := l.shortDeliveries.Load(); got != 3 {
		t.Errorf("short deliveries %d, want 3", got)
	}
	plain := &load{}
	plain.checkDeliveries(client.SendResult{})
	if got := plain.shortDeliveries.Load(); got != 0 {
		t.Errorf("a plain queue's send counted short")
	}
}

func TestPerMessageAndSpread(t *testing.T) {
	heap := func(m *memReading) []uint64 { return m.Heap }
	a := &memReading{Heap: []uint64{100 << 20, 110 << 20, 90 << 20}}
	b := &memReading{Heap: []uint64{100<<20 + 3000*1000, 110<<20 + 2000*1000, 90<<20 + 4000*1000}}
	if got := perMessage(a, b, heap, 1000); got != 3000 {
		t.Errorf("per message %v, want 3000 (the mean growth per node over 1000 messages)", got)
	}
	if got := perMessage(b, a, heap, 1000); got != -3000 {
		t.Errorf("shrinking: %v, want -3000", got)
	}
	if got := perMessage(nil, b, heap, 1000); got != 0 {
		t.Errorf("missing reading: %v", got)
	}
	if got := perMessage(a, &memReading{}, heap, 1000); got != 0 {
		t.Errorf("unreadable nodes: %v", got)
	}
	lo, hi := spread([]uint64{0, 10, 20}, []uint64{200, 110, 420}, 2)
	if lo != 50 || hi != 200 {
		t.Errorf("spread %v-%v, want 50-200", lo, hi)
	}
	if lo, hi := spread(nil, nil, 2); lo != 0 || hi != 0 {
		t.Errorf("spread of nothing %v-%v", lo, hi)
	}
}

// The memory probe forces a GC through each node's pprof before it reads
// the heap from the node's metrics.
func TestMemProbeForcesGCFirst(t *testing.T) {
	var mu sync.Mutex
	var order []string
	call := func(what string) {
		mu.Lock()
		order = append(order, what)
		mu.Unlock()
	}
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/pprof/heap":
			if r.URL.Query().Get("gc") != "1" {
				http.Error(w, "no gc", http.StatusBadRequest)
				return
			}
			call("gc")
			fmt.Fprint(w, "profile")
		case "/metrics":
			call("read")
			fmt.Fprintln(w, "go_memstats_heap_alloc_bytes 1.25e+08")
			fmt.Fprintln(w, "process_resident_memory_bytes 3e+08")
		default:
			http.NotFound(w, r)
		}
	}))
	defer node.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rss, _ := newNodeSource("", node.URL+"/metrics")
	p := memProbe{rss: rss, metrics: []string{node.URL + "/metrics"}, pprof: []string{node.URL + "/"}}
	m, err := p.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Heap, []uint64{125e6}) || !slices.Equal(m.RSS, []uint64{300e6}) {
		t.Errorf("reading %+v", m)
	}
	mu.Lock()
	if len(order) != 3 || order[0] != "gc" {
		t.Errorf("calls %v, want the GC first, then the heap and RSS reads", order)
	}
	mu.Unlock()
	p.pprof = []string{node.URL + "/nosuch"}
	if _, err := p.read(ctx); err == nil || !strings.Contains(err.Error(), "force GC") {
		t.Errorf("failed GC: %v, want an error naming it", err)
	}
}

// The report keeps the fields a script reads, and a cell that failed its
// check is still printed.
func TestTopicReport(t *testing.T) {
	r := &topicResult{Workload: "topic", Producers: 16, Inflight: 256, SendMode: "async", Consumers: 4, Batch: 256, AckMode: "async", Size: 1024,
		Cells: []topicCell{
			{Subs: 4, Topic: "t", DurationS: 20, PublishedPerS: 5000, DeliveriesPerS: 20000, MinSubPerS: 4900, MaxSubPerS: 5100},
			{Subs: 16, Topic: "u", Held: 1000, HeapPerMsg: 9000, RSSPerMsg: 12000, LiveHeap: true,
				MemBefore: &memReading{Heap: []uint64{1 << 20}}, MemHeld: &memReading{Heap: []uint64{10 << 20}}, Lost: 2, Missing: []string{"0/1@3"}},
		}}
	var js bytes.Buffer
	if err := printResult(&js, r, true); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Cells []map[string]any `json:"cells"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"subscriptions", "published_per_s", "deliveries_per_s", "min_subscription_per_s", "backlog_at_end", "lost", "short_deliveries"} {
		if _, ok := got.Cells[0][k]; !ok {
			t.Errorf("JSON cell lacks %q: %s", k, js.String())
		}
	}
	for _, k := range []string{"held", "heap_bytes_per_msg_per_node", "rss_bytes_per_msg_per_node", "memory_held", "live_heap"} {
		if _, ok := got.Cells[1][k]; !ok {
			t.Errorf("JSON hold cell lacks %q: %s", k, js.String())
		}
	}
	var text bytes.Buffer
	if err := printResult(&text, r, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deliveries/s", "20000", "per subscription 4900-5100", "live heap 9000 B", "562 B per copy", "16 bodies would be 16384 B", "0/1@3"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestJoinErrsKeepsFailed(t *testing.T) {
	one := fmt.Errorf("%w: lost 1", errFailed)
	if err := joinErrs([]error{one}); err != one {
		t.Errorf("one error rewrapped: %v", err)
	}
	if err := joinErrs([]error{one, fmt.Errorf("%w: lost 2", errFailed)}); !errors.Is(err, errFailed) || !strings.Contains(err.Error(), "lost 2") {
		t.Errorf("joined %v", err)
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestTopicAgainstCluster runs the topic workload, shrunk, against real
// node processes: a throughput cell of 1 and of 3 subscriptions, then a
// hold of 8. It fails on correctness (a copy of an acknowledged publish
// not delivered to a subscription, a publish reporting fewer deliveries)
// and on a body stored per copy: 8 bodies per held message would take at
// least 8 KiB of live heap per message on each node. Rates are reported.
func TestTopicAgainstCluster(t *testing.T) {
	var nodeArgs [][]string
	var pprof []string
	for range 3 {
		a := freeAddr(t)
		nodeArgs = append(nodeArgs, []string{"--pprof-bind", a})
		pprof = append(pprof, "http://"+a)
	}
	c := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 1, NodeArgs: nodeArgs})
	var metrics []string
	for _, n := range c.Nodes {
		metrics = append(metrics, "http://"+n.HTTP+"/metrics")
	}
	run := func(t *testing.T, args ...string) *topicResult {
		t.Helper()
		cfg := mustParse(t, append([]string{"topic", "--quiet", "--metrics", strings.Join(metrics, ","), "--drain-timeout", "60s",
			"--producers", "2", "--inflight", "16", "--consumers", "2", "--batch", "32"}, args...)...)
		cfg.Addrs = c.Addrs()
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := runTopic(ctx, cfg, io.Discard)
		if err != nil {
			t.Fatalf("topic: %v (result %+v)", err, res)
		}
		return res.(*topicResult)
	}
	t.Run("throughput", func(t *testing.T) {
		r := run(t, "--subs", "1,3", "--duration", "2s", "--warmup", "500ms")
		if len(r.Cells) != 2 {
			t.Fatalf("%d cells, want 2", len(r.Cells))
		}
		for _, cell := range r.Cells {
			l := cell.Ledger
			if cell.Lost != 0 || cell.ShortDeliveries != 0 || l.Acked == 0 || l.Delivered != l.Acked*uint64(cell.Subs) {
				t.Errorf("%d subscriptions: ledger %+v, short deliveries %d (last error %q)", cell.Subs, l, cell.ShortDeliveries, cell.LastError)
			}
			if cell.PublishedPerS <= 0 || cell.DeliveriesPerS <= 0 || cell.MinSubPerS <= 0 || cell.Publish.Count == 0 || cell.E2E.Count == 0 {
				t.Errorf("%d subscriptions unmeasured: %+v", cell.Subs, cell)
			}
			t.Logf("%d subscriptions: published %.0f/s, deliveries %.0f/s (per subscription %.0f-%.0f), e2e p99 %.1f ms",
				cell.Subs, cell.PublishedPerS, cell.DeliveriesPerS, cell.MinSubPerS, cell.MaxSubPerS, cell.E2EP99)
		}
	})
	t.Run("hold", func(t *testing.T) {
		const subs, held = 8, 3000
		r := run(t, "--subs", fmt.Sprint(subs), "--hold", fmt.Sprint(held), "--pprof", strings.Join(pprof, ","))
		cell := r.Cells[0]
		if cell.Lost != 0 || cell.ShortDeliveries != 0 || cell.Ledger.Delivered != held*subs {
			t.Errorf("ledger %+v, short deliveries %d (last error %q)", cell.Ledger, cell.ShortDeliveries, cell.LastError)
		}
		if !cell.LiveHeap || cell.MemoryError != "" || len(cell.MemHeld.Heap) != 3 {
			t.Fatalf("memory readings %+v %+v, error %q", cell.MemBefore, cell.MemHeld, cell.MemoryError)
		}
		if cell.HeapPerMsg <= 0 || cell.HeapPerMsg >= subs*1024 {
			t.Errorf("live heap per held message %.0f B per node, want above 0 and below %d (the bodies of %d copies)", cell.HeapPerMsg, subs*1024, subs)
		}
		t.Logf("%d subscriptions, %d held: live heap %.0f B, RSS %.0f B per message per node; %.0f B left after the drain",
			subs, held, cell.HeapPerMsg, cell.RSSPerMsg, cell.HeapLeftPerMsg)
	})
}

// Producers wait while more copies than --max-backlog wait for consumers,
// and stop waiting when the backlog shrinks or the producers stop.
func TestWaitBacklog(t *testing.T) {
	l := &load{recvQueues: []string{"a", "b"}, maxBacklog: 10}
	l.enqueued.Store(10)
	l.processed.Store(5) // 20 copies, 5 acked: 15 waiting
	if got := l.backlog(); got != 15 {
		t.Fatalf("backlog %d, want 15", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan bool)
	go func() { done <- l.waitBacklog(ctx) }()
	select {
	case <-done:
		t.Fatal("producer not held at a backlog of 15 over a cap of 10")
	case <-time.After(50 * time.Millisecond):
	}
	l.processed.Store(10)
	if !<-done {
		t.Error("held producer told to stop when the backlog shrank")
	}
	if got := l.backlogWaits.Load(); got != 1 {
		t.Errorf("backlog waits %d, want 1", got)
	}
	l.processed.Store(0)
	l.stopSend.Store(true)
	if l.waitBacklog(ctx) {
		t.Error("producer held past the stop")
	}
	if !(&load{}).waitBacklog(ctx) {
		t.Error("no cap held a producer")
	}
}
