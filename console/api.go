package console

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
)

// live is what a page's script polls: text for the elements marked
// data-live="KEY" and the series of the plots marked data-plot="KEY".
type live struct {
	Fields map[string]string `json:"fields"`
	Plots  map[string]*plot  `json:"plots,omitempty"`
	Error  string            `json:"error,omitempty"`
	At     int64             `json:"at"` // Unix ms
}

type plot struct {
	Unit   string   `json:"unit"`
	Note   string   `json:"note,omitempty"` // shown while the plot has no line
	T      []int64  `json:"t"`              // Unix ms
	Series []series `json:"series"`
}

type series struct {
	Name string     `json:"name"`
	V    []*float64 `json:"v"` // null: no value (a gap)
}

func num(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// apiFunc fills out; dial gives the caller's client, called once the
// request's own fields are checked.
type apiFunc func(ctx context.Context, r *http.Request, dial func() (*client.Client, error), out *live) error

// api serves a JSON endpoint for the caller's session; the API's refusal
// comes back as the HTTP status and the error text.
func (c *Console) api(fn apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out := &live{Fields: map[string]string{}, At: c.o.Now().UnixMilli()}
		code := http.StatusOK
		se, ok, err := c.session(w, r)
		switch {
		case err != nil:
			code, out.Error = http.StatusServiceUnavailable, "console: "+err.Error()
		case !ok:
			code, out.Error = http.StatusUnauthorized, "not logged in (or the session ended): log in again at "+Prefix+"login"
		default:
			ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
			defer cancel()
			err := fn(ctx, r, func() (*client.Client, error) { return c.clientOf(ctx, se) }, out)
			if err != nil {
				code, out.Error = httpStatus(err), apiError(err)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(out)
	}
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

func rate(r rates, v float64) string {
	if !r.ok || math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}

func (c *Console) clusterAPI(ctx context.Context, _ *http.Request, dial func() (*client.Client, error), out *live) error {
	cl, err := dial()
	if err != nil {
		return err
	}
	d, err := c.cluster(ctx, cl)
	if err != nil {
		return err
	}
	f := out.Fields
	f["meta-leader"] = d.Status.MetaLeaderID
	for _, m := range d.Status.Members {
		f["member:"+m.NodeID+":state"] = m.State
	}
	for _, n := range d.Nodes {
		f["node:"+n.NodeID+":state"] = nodeState(n)
		f["node:"+n.NodeID+":leads"] = shardList(n.Leaders)
	}
	out.Plots = map[string]*plot{}
	for _, s := range d.Shards {
		id := u64(uint64(s.ID))
		f["shard:"+id+":leader"] = s.Leader
		f["shard:"+id+":term"] = u64(s.Term)
		for _, rep := range s.Replicas {
			f["rep:"+id+":"+rep.Node+":commit"] = u64(rep.Commit)
			f["rep:"+id+":"+rep.Node+":applied"] = u64(rep.Applied)
			f["rep:"+id+":"+rep.Node+":lag"] = rep.Lag
			f["rep:"+id+":"+rep.Node+":snapshot"] = rep.Snapshot
		}
		f["shard:"+id+":mean"] = s.LastMean
		f["shard:"+id+":p99"] = s.LastP99
		f["shard:"+id+":count"] = strconv.FormatFloat(s.LastCount, 'f', 0, 64)
		p := &plot{Unit: "ms", Series: []series{{Name: "mean"}, {Name: "p99 (bucket bound)"}}}
		switch {
		case len(s.Latency) >= 2:
		case s.Leader == "":
			p.Note = "the shard has no leader"
		case s.Leader != c.o.NodeID:
			p.Note = "node " + c.o.NodeID + " does not lead this shard: see the console of " + s.Leader
		}
		for _, l := range s.Latency {
			p.T = append(p.T, l.At.UnixMilli())
			p.Series[0].V = append(p.Series[0].V, num(l.Mean*1000))
			p.Series[1].V = append(p.Series[1].V, num(l.P99*1000))
		}
		out.Plots["lat:"+id] = p
	}
	return nil
}

func queueFields(f map[string]string, st client.QueueStats, r rates) {
	k := "q:" + st.Name + ":"
	f[k+"ready"] = u64(st.Ready)
	f[k+"delayed"] = u64(st.Delayed)
	f[k+"inflight"] = u64(st.InFlight)
	f[k+"dead"] = u64(st.Dead)
	f[k+"oldest"] = age(st.OldestReady)
	f[k+"blocked"] = u64(st.BlockedGroups)
	f[k+"bytes"] = u64(st.LiveBytes)
	f[k+"completed"] = u64(st.Completed)
	f[k+"paused"] = map[bool]string{true: "paused", false: "no"}[st.Paused]
	f[k+"sent"] = rate(r, r.Sent)
	f[k+"received"] = rate(r, r.Received)
	f[k+"acked"] = rate(r, r.Acked)
	f[k+"deadlettered"] = rate(r, r.DeadLettered)
}

func (c *Console) queuesAPI(ctx context.Context, _ *http.Request, dial func() (*client.Client, error), out *live) error {
	cl, err := dial()
	if err != nil {
		return err
	}
	d, err := c.queues(ctx, cl)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(d.Rows))
	for _, row := range d.Rows {
		names = append(names, row.Info.Name)
		if row.Err != "" {
			out.Fields["q:"+row.Info.Name+":error"] = row.Err
			continue
		}
		queueFields(out.Fields, row.Stats, row.Rates)
	}
	out.Fields["queues:count"] = strconv.Itoa(d.Total)
	out.Fields["queues:names"] = strings.Join(names, "\n")
	return nil
}

// queueAPI is one queue's figures and plots. The caller's own QueueStats
// call comes first: the plots (sampled with another caller's key,
// sampleOnce) are shown only to a caller the API lets read the queue.
func (c *Console) queueAPI(ctx context.Context, r *http.Request, dial func() (*client.Client, error), out *live) error {
	name := strings.TrimSpace(r.URL.Query().Get("name"))
	if name == "" {
		return badInput("name is required: /console/api/queue?name=QUEUE")
	}
	cl, err := dial()
	if err != nil {
		return err
	}
	st, err := cl.Stats(ctx, name)
	if err != nil {
		return err
	}
	// Samples are kept under the name the API answered with, which for a
	// tenant's caller is the qualified one: looking up what the caller
	// typed would show another queue's history.
	queueFields(out.Fields, st, c.samples.lastRates(st.Name))
	ss := c.samples.queue(st.Name)
	depth := &plot{Unit: "messages", Series: []series{{Name: "ready"}, {Name: "delayed"}, {Name: "in flight"}, {Name: "dead"}}}
	rp := &plot{Unit: "per second", Series: []series{{Name: "sent"}, {Name: "received"}, {Name: "acked"}, {Name: "dead-lettered"}}}
	for i, s := range ss {
		depth.T = append(depth.T, s.At.UnixMilli())
		for j, v := range []uint64{s.Ready, s.Delayed, s.InFlight, s.Dead} {
			depth.Series[j].V = append(depth.Series[j].V, num(float64(v)))
		}
		if i == 0 {
			continue
		}
		rt := rateBetween(ss[i-1], s)
		rp.T = append(rp.T, s.At.UnixMilli())
		for j, v := range []float64{rt.Sent, rt.Received, rt.Acked, rt.DeadLettered} {
			if !rt.ok {
				v = math.NaN()
			}
			rp.Series[j].V = append(rp.Series[j].V, num(v))
		}
	}
	out.Plots = map[string]*plot{"depth": depth, "rates": rp}
	return nil
}
