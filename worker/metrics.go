package worker

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherType is the type label of messages whose type has no handler of
// its own (Register): producers choose types, so only the types this
// worker registered get label values, and the registry stays bounded.
const OtherType = "_other"

// workerMetrics are the worker's Prometheus metrics (Options.Metrics),
// shared by every worker registered on the same registry.
type workerMetrics struct {
	handler  *prometheus.HistogramVec
	active   *prometheus.GaugeVec
	outcomes *prometheus.CounterVec
}

func newWorkerMetrics(reg prometheus.Registerer) (*workerMetrics, error) {
	m := &workerMetrics{
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "raftq_worker_handler_seconds",
			Help:    "How long handlers ran, by queue and message type (types without a handler of their own: _other).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"queue", "type"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "raftq_worker_active_handlers",
			Help: "Handlers running now, by queue.",
		}, []string{"queue"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "raftq_worker_outcomes_total",
			Help: "Messages settled by the worker, by queue, message type and outcome (acked, nacked, panicked, retried, dead_lettered, released, timed_out, snoozed, circuit_open, lease_lost, settle_failed).",
		}, []string{"queue", "type", "outcome"}),
	}
	var err error
	m.handler, err = register(reg, m.handler)
	if err != nil {
		return nil, err
	}
	if m.active, err = register(reg, m.active); err != nil {
		return nil, err
	}
	if m.outcomes, err = register(reg, m.outcomes); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered
// under its name: several workers of one process (one per queue) share
// the metrics.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &are):
		if ex, ok := are.ExistingCollector.(C); ok {
			return ex, nil
		}
	}
	return c, fmt.Errorf("register worker metrics: %w", err)
}

// typeLabel is the message type's label value: its own for a type with a
// registered handler, OtherType for the rest.
func (w *Worker) typeLabel(msgType string) string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if _, ok := w.handlers[msgType]; ok {
		return msgType
	}
	return OtherType
}

// handlerStarted counts a handler in as running, and returns what counts
// it out.
func (w *Worker) handlerStarted() func() {
	if w.met == nil {
		return func() {}
	}
	g := w.met.active.WithLabelValues(w.queue)
	g.Inc()
	return g.Dec
}

// observe records one settled message.
func (w *Worker) observe(m *Message, s Settlement) {
	if w.met == nil {
		return
	}
	t := w.typeLabel(m.Type)
	w.met.outcomes.WithLabelValues(w.queue, t, string(s.Outcome)).Inc()
	if s.Took > 0 {
		w.met.handler.WithLabelValues(w.queue, t).Observe(s.Took.Seconds())
	}
}
