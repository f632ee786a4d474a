// Package clockskew measures how far this node's clock is from its peers'
// over traffic the nodes already exchange (memberlist's probe acks carry the
// responder's wall clock), and decides whether this node's clock is too far
// from the cluster's to let it lead: the shard FSM's clock is made of leader
// stamps (docs/fsm.md, "Time and the clock"), so a leader's clock offset
// becomes an error in every lease, delay and dedup window. CockroachDB's
// max-offset check is the model.
package clockskew

import (
	"slices"
	"sync"
	"time"
)

// Sample is one measurement of a peer's clock against ours: the peer's
// clock minus ours, known to within ±Uncertainty (half the round trip: the
// peer read its clock somewhere between our send and our receive).
type Sample struct {
	Offset      time.Duration
	Uncertainty time.Duration
	// At is when it was taken, on the local monotonic clock (time.Now),
	// never on the clock being judged.
	At time.Time
}

// Measure turns one probe into a sample: remote is the peer's clock when
// it answered, local ours when the answer arrived, rtt the probe's round
// trip. The peer answered some time within the round trip, so its reading
// belongs to our clock at local-rtt/2, give or take rtt/2.
func Measure(remote, local time.Time, rtt time.Duration, at time.Time) Sample {
	rtt = max(rtt, 0)
	return Sample{Offset: remote.Sub(local.Add(-rtt / 2)), Uncertainty: rtt / 2, At: at}
}

// Estimate is a peer's offset as the median of its recent samples.
type Estimate struct {
	Offset      time.Duration // peer's clock minus ours
	Uncertainty time.Duration // median uncertainty of the samples
	Samples     int
}

// Estimator keeps the last few samples of every peer. Safe for concurrent
// use: memberlist reports samples on its own goroutines.
type Estimator struct {
	size int
	ttl  time.Duration

	mu    sync.Mutex
	peers map[string][]Sample // oldest first, at most size
}

// NewEstimator keeps up to window samples per peer and forgets samples
// older than ttl, so a peer that stopped answering (dead, partitioned, or
// an old node without the payload) stops counting.
func NewEstimator(window int, ttl time.Duration) *Estimator {
	return &Estimator{size: max(window, 1), ttl: ttl, peers: map[string][]Sample{}}
}

// Add records a sample of peer.
func (e *Estimator) Add(peer string, s Sample) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := append(e.peers[peer], s)
	if len(w) > e.size {
		w = slices.Delete(w, 0, len(w)-e.size)
	}
	e.peers[peer] = w
}

// Forget drops peer's samples (it left or died: a restarted process may
// come back with another clock).
func (e *Estimator) Forget(peer string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.peers, peer)
}

// Estimates returns the peers with at least one sample younger than the
// ttl at now, each as the median of those samples: one probe delayed by a
// pause or a retransmit does not move it, and a clock that stepped is
// followed once half the window has seen the step.
func (e *Estimator) Estimates(now time.Time) map[string]Estimate {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]Estimate, len(e.peers))
	for peer, w := range e.peers {
		fresh := w[:0:0]
		for _, s := range w {
			if now.Sub(s.At) <= e.ttl {
				fresh = append(fresh, s)
			}
		}
		if len(fresh) == 0 {
			delete(e.peers, peer)
			continue
		}
		offs := make([]time.Duration, len(fresh))
		uncs := make([]time.Duration, len(fresh))
		for i, s := range fresh {
			offs[i], uncs[i] = s.Offset, s.Uncertainty
		}
		out[peer] = Estimate{Offset: median(offs), Uncertainty: median(uncs), Samples: len(fresh)}
	}
	return out
}

// median of a non-empty slice (the lower middle for an even count, so
// that it is always one of the measured values); it sorts ds.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}
