package ledger

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftq/raftq/client"
)

// Traffic runs producers and consumers against one queue through one
// client until Stop, booking every call in a Ledger. Its counters let a
// test wait for positive signals (calls in flight, sends acknowledged
// since a fault) instead of sleeping.
type Traffic struct {
	L     *Ledger
	cl    *client.Client
	queue string
	ctx   context.Context
	stop  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	// Calls in flight now.
	Sending, Receiving, Acking atomic.Int64
	// SendsAcked counts acknowledged sends, AcksConfirmed consumer acks
	// the server confirmed.
	SendsAcked, AcksConfirmed atomic.Int64

	// OnSent, if set before the producers start, sees the message id of
	// every acknowledged send.
	OnSent func(id string)

	mu      sync.Mutex
	unclear []error
}

// NewTraffic returns traffic on queue through cl; ctx bounds every call.
func NewTraffic(ctx context.Context, l *Ledger, cl *client.Client, queue string) *Traffic {
	return &Traffic{L: l, cl: cl, queue: queue, ctx: ctx, stop: make(chan struct{})}
}

// ProducerOptions shape one producer.
type ProducerOptions struct {
	// Window > 0 keeps that many SendAsync calls outstanding; 0 sends one
	// blocking Send at a time.
	Window int
	// DedupKeys gives every send its body as dedup key; without, the
	// client's automatic keys (client.WithAutoDedup) are what prevent a
	// retried send from being stored twice.
	DedupKeys bool
	// Groups > 0 spreads sends over that many message groups.
	Groups int
	// Ordered: the queue is FIFO, and Check judges that each of this
	// producer's groups is delivered in its send order (Sequenced). Only
	// with Window 0, where each send waits for the one before.
	Ordered bool
}

func (t *Traffic) stopped() bool {
	select {
	case <-t.stop:
		return true
	default:
		return t.ctx.Err() != nil
	}
}

// Producer starts a producer sending bodies name-0, name-1, ... until Stop.
func (t *Traffic) Producer(name string, o ProducerOptions) {
	t.wg.Go(func() {
		type pending struct {
			body   string
			p      *client.PendingSend
			cancel context.CancelFunc
		}
		var window []pending
		settle := func(f pending) {
			r, err := f.p.Wait(t.ctx)
			f.cancel()
			t.Sending.Add(-1)
			t.sent(f.body, r.ID, err)
		}
		defer func() {
			for _, f := range window {
				settle(f)
			}
		}()
		for k := 0; !t.stopped(); k++ {
			body := name + "-" + strconv.Itoa(k)
			var opts []client.SendOption
			if o.DedupKeys {
				opts = append(opts, client.DedupKey(body))
			}
			group := ""
			if o.Groups > 0 {
				group = "g" + strconv.Itoa(k%o.Groups)
				opts = append(opts, client.Group(group))
			}
			t.L.Attempt(body)
			if o.Ordered && group != "" && o.Window == 0 {
				t.L.Sequenced(name+"/"+group, body)
			}
			t.Sending.Add(1)
			sctx, cancel := context.WithTimeout(t.ctx, 15*time.Second)
			if o.Window == 0 {
				r, err := t.cl.Send(sctx, t.queue, []byte(body), opts...)
				cancel()
				t.Sending.Add(-1)
				if !t.sent(body, r.ID, err) {
					time.Sleep(20 * time.Millisecond) // a down cluster refuses at once: do not spin
				}
				continue
			}
			window = append(window, pending{body, t.cl.SendAsync(sctx, t.queue, []byte(body), opts...), cancel})
			if len(window) == o.Window {
				settle(window[0])
				window = window[1:]
			}
		}
	})
}

func (t *Traffic) sent(body, id string, err error) bool {
	t.L.Sent(body, id, err)
	if err == nil {
		t.SendsAcked.Add(1)
		if t.OnSent != nil {
			t.OnSent(id)
		}
	}
	return err == nil
}

// Consumer starts a consumer that receives up to max messages at a time
// and acks each batch at once, until Stop.
func (t *Traffic) Consumer(name string, max int) {
	t.wg.Go(func() {
		for !t.stopped() {
			t.Receiving.Add(1)
			rctx, cancel := context.WithTimeout(t.ctx, 15*time.Second)
			ms, err := t.L.Receive(rctx, t.cl, t.queue, client.ReceiveOptions{Max: max, Wait: 500 * time.Millisecond, Consumer: name})
			cancel()
			t.Receiving.Add(-1)
			if err != nil && len(ms) == 0 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if len(ms) == 0 {
				continue
			}
			t.Acking.Add(1)
			actx, cancel := context.WithTimeout(t.ctx, 15*time.Second)
			errs := t.L.Ack(actx, t.cl, ms)
			cancel()
			t.Acking.Add(-1)
			for i, err := range errs {
				switch {
				case err == nil:
					t.AcksConfirmed.Add(1)
				case !Clear(err):
					t.mu.Lock()
					t.unclear = append(t.unclear, fmt.Errorf("%s: ack of %s: %w", name, ms[i].ID, err))
					t.mu.Unlock()
				}
			}
		}
	})
}

// Stop ends every producer and consumer after its current call and waits
// for them.
func (t *Traffic) Stop() {
	t.once.Do(func() { close(t.stop) })
	t.wg.Wait()
}

// Unclear lists consumer acks that failed without a clear answer (see
// Clear).
func (t *Traffic) Unclear() []error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]error(nil), t.unclear...)
}

// InFlight reports the calls in flight now.
func (t *Traffic) InFlight() string {
	return fmt.Sprintf("%d sends, %d receives, %d acks", t.Sending.Load(), t.Receiving.Load(), t.Acking.Load())
}

// WaitInFlight polls until a send, a receive and an ack are all in flight
// at once (each only when asked for), so a fault injected next lands on
// calls in progress.
func (t *Traffic) WaitInFlight(ctx context.Context, sends, receives, acks bool) error {
	return WaitFor(ctx, "calls in flight", func() bool {
		return (!sends || t.Sending.Load() > 0) && (!receives || t.Receiving.Load() > 0) && (!acks || t.Acking.Load() > 0)
	}, 100*time.Microsecond)
}

// WaitFor polls cond every poll until it holds or ctx ends.
func WaitFor(ctx context.Context, what string, cond func() bool, poll time.Duration) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(poll):
		}
	}
	return nil
}
