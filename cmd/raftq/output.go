package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/raftq/raftq/client"
)

// output renders results as aligned tables for people or JSON for scripts.
// JSON field names are snake_case and stable; durations are milliseconds and
// times RFC 3339 in UTC.
type output struct {
	w    io.Writer
	json bool
}

func (o *output) emit(v any) error {
	enc := json.NewEncoder(o.w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

func (o *output) table(header string, rows [][]string) error {
	tw := tabwriter.NewWriter(o.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

func (o *output) done(text string, v map[string]any) error {
	if o.json {
		return o.emit(v)
	}
	_, err := fmt.Fprintln(o.w, text)
	return err
}

// tsLayout is RFC 3339 with milliseconds always shown (the server's
// precision), so times keep one width and table columns stay aligned.
const tsLayout = "2006-01-02T15:04:05.000Z07:00"

func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(tsLayout)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable shows a body as text when it is UTF-8 without control
// characters, else quoted with Go escapes, so one message stays on one line.
func printable(b []byte) string {
	s := string(b)
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return s
	}
	return strconv.Quote(s)
}

// jsonBody keeps text bodies readable and binary ones lossless.
func jsonBody(b []byte, out map[string]any) {
	if utf8.Valid(b) {
		out["body"] = string(b)
	} else {
		out["body_base64"] = base64.StdEncoding.EncodeToString(b)
	}
}

func queueJSON(q client.QueueInfo) map[string]any {
	p := q.Options
	return map[string]any{
		"name": q.Name, "fifo": p.FIFO, "created": ts(q.Created),
		"visibility_ms": p.Visibility.Milliseconds(), "max_receives": p.MaxReceives,
		"backoff_base_ms": p.BackoffBase.Milliseconds(), "backoff_max_ms": p.BackoffMax.Milliseconds(),
		"dedup_window_ms": p.DedupWindow.Milliseconds(), "retention_ms": p.Retention.Milliseconds(),
		"delay_ms": p.Delay.Milliseconds(), "max_message_bytes": p.MaxMessageBytes,
		"completed_retention_ms": p.CompletedRetention.Milliseconds(), "dlq_disabled": p.DisableDLQ,
		"max_messages_per_shard": p.MaxMessagesPerShard, "max_bytes_per_shard": p.MaxBytesPerShard,
		"completed_max_bytes_per_shard": p.CompletedMaxBytesPerShard,
		"quotas":                        quotasJSON(p.Quotas),
		"dead_retention_ms":             p.DeadRetention.Milliseconds(),
		"paused":                        q.Paused,
		// Fan-out (docs/topics.md): empty or false for a plain queue.
		"topic": p.Topic, "topic_retention_ms": p.TopicRetention.Milliseconds(),
		"subscription_of": p.SubscriptionOf, "filter": p.Filter, "replay_from": replayFrom(p),
	}
}

// replayFrom is a subscription's replay start for JSON: "" for a queue
// that is no subscription.
func replayFrom(p client.QueueOptions) string {
	if p.SubscriptionOf == "" {
		return ""
	}
	return replayName(p.ReplayFrom)
}

func mode(fifo bool) string {
	if fifo {
		return "fifo"
	}
	return "standard"
}

func (o *output) queue(q client.QueueInfo) error {
	if o.json {
		return o.emit(queueJSON(q))
	}
	p := q.Options
	var quotas [][]string
	if p.Quotas != (client.Quotas{}) {
		quotas = quotaRows("quota ", p.Quotas, false)
	}
	var fan [][]string
	if p.Topic {
		fan = [][]string{{"topic", "true"}, {"topic-retention", topicRetention(p.TopicRetention)}}
	}
	if p.SubscriptionOf != "" {
		fan = [][]string{{"subscription-of", p.SubscriptionOf}, {"filter", dash(p.Filter)}, {"from", replayName(p.ReplayFrom)}}
	}
	return o.table("FIELD\tVALUE", append(append([][]string{
		{"name", q.Name}, {"mode", mode(p.FIFO)}, {"created", ts(q.Created)}, {"paused", strconv.FormatBool(q.Paused)},
		{"visibility", p.Visibility.String()}, {"max-receives", strconv.Itoa(int(p.MaxReceives))},
		{"backoff-base", p.BackoffBase.String()}, {"backoff-max", p.BackoffMax.String()},
		{"dedup-window", p.DedupWindow.String()}, {"retention", p.Retention.String()},
		{"delay", p.Delay.String()}, {"max-size", strconv.Itoa(int(p.MaxMessageBytes))},
		{"dlq", strconv.FormatBool(!p.DisableDLQ)}, {"dead-retention", deadRetention(p.DeadRetention)},
		{"max-messages-per-shard", limit(p.MaxMessagesPerShard)}, {"max-bytes-per-shard", limit(p.MaxBytesPerShard)},
		{"completed-retention", p.CompletedRetention.String()}, {"completed-max-bytes-per-shard", completedBound(p.CompletedMaxBytesPerShard)},
	}, fan...), quotas...))
}

// completedBound renders a queue's result byte bound, where 0 means the
// server's default.
func completedBound(n uint64) string {
	if n == 0 {
		return "default (64 MiB)"
	}
	return strconv.FormatUint(n, 10)
}

// deadRetention renders a dead retention, where 0 means none.
func deadRetention(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

// limit renders a capacity setting, where 0 means none.
func limit(n uint64) string {
	if n == 0 {
		return "none"
	}
	return strconv.FormatUint(n, 10)
}

func (o *output) queues(qs []client.QueueInfo) error {
	if o.json {
		out := make([]map[string]any, len(qs))
		for i, q := range qs {
			out[i] = queueJSON(q)
		}
		return o.emit(out)
	}
	rows := make([][]string, len(qs))
	for i, q := range qs {
		rows[i] = []string{q.Name, mode(q.Options.FIFO), q.Options.Visibility.String(), strconv.Itoa(int(q.Options.MaxReceives)), ts(q.Created), strconv.FormatBool(q.Paused)}
	}
	return o.table("NAME\tMODE\tVISIBILITY\tMAX-RECEIVES\tCREATED\tPAUSED", rows)
}

func (o *output) stats(s client.QueueStats) error {
	if o.json {
		return o.emit(map[string]any{
			"name": s.Name, "ready": s.Ready, "delayed": s.Delayed, "in_flight": s.InFlight, "dead": s.Dead, "dead_expired": s.DeadExpired,
			"oldest_ready_age_ms": s.OldestReady.Milliseconds(), "blocked_groups": s.BlockedGroups,
			"live_bytes": s.LiveBytes, "tenant": s.Tenant, "quotas": quotasJSON(s.Quotas), "tenant_quotas": quotasJSON(s.TenantQuotas),
			"completed": s.Completed, "completed_bytes": s.CompletedBytes, "completed_evicted": s.CompletedEvicted,
			"paused": s.Paused, "moves": movesJSON(s.Moves), "retained": s.Retained,
		})
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	err := o.table("QUEUE\tREADY\tDELAYED\tIN-FLIGHT\tDEAD\tOLDEST-READY\tBLOCKED-GROUPS\tLIVE-BYTES",
		[][]string{{s.Name, u(s.Ready), u(s.Delayed), u(s.InFlight), u(s.Dead), s.OldestReady.String(), u(s.BlockedGroups), u(s.LiveBytes)}})
	if err == nil && s.Paused {
		_, err = fmt.Fprintf(o.w, "\npaused: receives return nothing until raftq queue resume %s\n", s.Name)
	}
	if err == nil && s.Retained > 0 {
		// A topic's publications kept for replay: never ready, never
		// received (docs/topics.md).
		_, err = fmt.Fprintf(o.w, "\nretained: %d publication(s) kept for subscriptions created with --from\n", s.Retained)
	}
	// Finished jobs, shown once there are any (docs/jobs.md): the table
	// stays narrow for a queue that keeps no results.
	if err == nil && s.Completed+s.CompletedBytes+s.CompletedEvicted+s.DeadExpired > 0 {
		if _, err = fmt.Fprintln(o.w); err == nil {
			err = o.table("COMPLETED\tRESULT-BYTES\tEVICTED\tDEAD-EXPIRED",
				[][]string{{u(s.Completed), u(s.CompletedBytes), u(s.CompletedEvicted), u(s.DeadExpired)}})
		}
	}
	if err != nil || (s.Quotas == client.Quotas{} && s.Tenant == "") {
		return err
	}
	// Quotas: the queue's own and its tenant's, beside what the queue
	// holds.
	qr, tr := quotaRows("", s.Quotas, false), quotaRows("", s.TenantQuotas, false)
	used := []string{"-", u(s.Ready + s.Delayed + s.InFlight), u(s.LiveBytes), u(s.InFlight)}
	rows := make([][]string, len(qr))
	for i := range qr {
		rows[i] = []string{qr[i][0], used[i], qr[i][1], tr[i][1]}
	}
	if _, err := fmt.Fprintln(o.w); err != nil {
		return err
	}
	tenant := "TENANT"
	if s.Tenant != "" {
		tenant = fmt.Sprintf("TENANT %q", s.Tenant)
	}
	return o.table("QUOTA\tQUEUE-USES\tQUEUE\t"+tenant, rows)
}

func (o *output) sent(r client.SendResult) error {
	if o.json {
		return o.emit(map[string]any{"id": r.ID, "deduplicated": r.Deduplicated})
	}
	if r.Deduplicated {
		_, err := fmt.Fprintf(o.w, "%s (deduplicated: an earlier message had this key)\n", r.ID)
		return err
	}
	_, err := fmt.Fprintln(o.w, r.ID)
	return err
}

func (o *output) received(ms []*client.Message) error {
	if o.json {
		out := make([]map[string]any, len(ms))
		for i, m := range ms {
			v := map[string]any{
				"id": m.ID, "receipt": m.Receipt, "lease_epoch": m.LeaseEpoch, "type": m.Type, "group": m.Group,
				"priority": m.Priority, "receive_count": m.ReceiveCount, "attributes": m.Attributes,
				"enqueued": ts(m.EnqueuedAt), "lease_deadline": ts(m.LeaseDeadline), "last_error": m.LastError,
			}
			jsonBody(m.Body, v)
			out[i] = v
		}
		return o.emit(out)
	}
	if len(ms) == 0 {
		_, err := fmt.Fprintln(o.w, "no messages")
		return err
	}
	rows := make([][]string, len(ms))
	for i, m := range ms {
		rows[i] = []string{m.ID, strconv.Itoa(int(m.ReceiveCount)), m.Receipt, printable(m.Body)}
	}
	return o.table("ID\tRECEIVES\tRECEIPT\tBODY", rows)
}

// acks prints one row per receipt; errs is nil when every receipt was
// acked.
func (o *output) acks(receipts []string, errs []error) error {
	if errs == nil {
		errs = make([]error, len(receipts))
	}
	if o.json {
		out := make([]map[string]any, len(receipts))
		for i, r := range receipts {
			v := map[string]any{"receipt": r, "ok": errs[i] == nil}
			if errs[i] != nil {
				v["error"] = message(errs[i])
			}
			out[i] = v
		}
		return o.emit(out)
	}
	rows := make([][]string, len(receipts))
	for i, r := range receipts {
		res := "acked"
		if errs[i] != nil {
			res = message(errs[i])
		}
		rows[i] = []string{r, res}
	}
	return o.table("RECEIPT\tRESULT", rows)
}

func messageJSON(m *client.MessageInfo) map[string]any {
	v := map[string]any{
		"id": m.ID, "queue": m.Queue, "state": m.State, "type": m.Type, "group": m.Group, "dedup_key": m.DedupKey,
		"priority": m.Priority, "attributes": m.Attributes, "enqueued": ts(m.EnqueuedAt), "available": ts(m.AvailableAt),
		"receive_count": m.ReceiveCount, "last_error": m.LastError, "lease_epoch": m.LeaseEpoch,
		"lease_deadline": ts(m.LeaseDeadline), "dead_reason": m.DeadReason,
	}
	jsonBody(m.Body, v)
	if m.Result != nil {
		if utf8.Valid(m.Result) {
			v["result"] = string(m.Result)
		} else {
			v["result_base64"] = base64.StdEncoding.EncodeToString(m.Result)
		}
	}
	hist := make([]map[string]any, len(m.History))
	for i, a := range m.History {
		hist[i] = map[string]any{"lease_epoch": a.LeaseEpoch, "received": ts(a.Received), "ended": ts(a.Ended), "outcome": a.Outcome, "error": a.Error, "consumer": a.Consumer}
	}
	v["history"] = hist
	return v
}

func (o *output) message(m *client.MessageInfo) error {
	if o.json {
		return o.emit(messageJSON(m))
	}
	if err := o.table("FIELD\tVALUE", [][]string{
		{"id", m.ID}, {"queue", m.Queue}, {"state", m.State}, {"type", dash(m.Type)}, {"group", dash(m.Group)},
		{"priority", strconv.Itoa(int(m.Priority))}, {"enqueued", ts(m.EnqueuedAt)}, {"available", ts(m.AvailableAt)},
		{"receives", strconv.Itoa(int(m.ReceiveCount))}, {"last-error", dash(printable([]byte(m.LastError)))},
		{"dead-reason", dash(m.DeadReason)}, {"body", printable(m.Body)}, {"result", dash(printable(m.Result))},
	}); err != nil {
		return err
	}
	if len(m.History) == 0 {
		return nil
	}
	fmt.Fprintln(o.w)
	rows := make([][]string, len(m.History))
	for i, a := range m.History {
		rows[i] = []string{strconv.FormatUint(a.LeaseEpoch, 10), ts(a.Received), ts(a.Ended), dash(a.Outcome), dash(a.Consumer), dash(printable([]byte(a.Error)))}
	}
	return o.table("EPOCH\tRECEIVED\tENDED\tOUTCOME\tCONSUMER\tERROR", rows)
}

func (o *output) dead(ms []*client.MessageInfo) error {
	if o.json {
		out := make([]map[string]any, len(ms))
		for i, m := range ms {
			out[i] = messageJSON(m)
		}
		return o.emit(out)
	}
	rows := make([][]string, len(ms))
	for i, m := range ms {
		rows[i] = []string{m.ID, strconv.Itoa(int(m.ReceiveCount)), dash(m.DeadReason), dash(printable([]byte(m.LastError)))}
	}
	return o.table("ID\tRECEIVES\tREASON\tLAST-ERROR", rows)
}

func (o *output) status(st *client.ClusterStatus) error {
	if o.json {
		return o.emit(st)
	}
	fmt.Fprintf(o.w, "node %s, meta leader %s\n\n", st.NodeID, dash(st.MetaLeaderID))
	rows := make([][]string, len(st.Members))
	for i, m := range st.Members {
		format := "-"
		if m.LogFormat > 0 {
			format = strconv.FormatUint(uint64(m.LogFormat), 10)
		}
		rows[i] = []string{m.NodeID, m.GRPCAddr, dash(m.PeerAddr), dash(m.RaftAddr), m.State, format}
	}
	if err := o.table("NODE\tGRPC\tPEER\tRAFT\tSTATE\tLOG-FORMAT", rows); err != nil {
		return err
	}
	fmt.Fprintln(o.w)
	rows = make([][]string, len(st.Shards))
	for i, s := range st.Shards {
		rows[i] = []string{strconv.Itoa(int(s.ID)), dash(s.LeaderID), dash(s.LeaderAddr), strconv.FormatUint(s.Term, 10),
			strconv.FormatUint(s.CommitIndex, 10), strconv.FormatUint(s.AppliedIndex, 10), dash(strings.Join(s.Replicas, ","))}
	}
	if err := o.table("SHARD\tLEADER\tADDR\tTERM\tCOMMIT\tAPPLIED\tREPLICAS", rows); err != nil {
		return err
	}
	for _, d := range st.Damaged {
		fmt.Fprintf(o.w, "\nDAMAGED replica %s on node %s (%s): %s\n", d.Group, st.NodeID, d.Reason, d.Detail)
	}
	return nil
}

func (o *output) nodes(ns []client.NodeInfo) error {
	if o.json {
		return o.emit(ns)
	}
	rows := make([][]string, len(ns))
	for i, n := range ns {
		format := "-"
		if n.LogFormat > 0 {
			format = strconv.FormatUint(uint64(n.LogFormat), 10)
		}
		state := n.State
		switch {
		case n.Retired:
			state = "retired"
		case n.Draining:
			state += ",draining"
		}
		rows[i] = []string{n.NodeID, dash(n.GRPCAddr), dash(n.PeerAddr), dash(n.RaftAddr), state, dash(n.Meta),
			dash(n.Version), format, dash(shardList(n.Replicas)), dash(shardList(n.Leaders))}
	}
	return o.table("NODE\tGRPC\tPEER\tRAFT\tSTATE\tMETA\tVERSION\tLOG-FORMAT\tREPLICAS\tLEADS", rows)
}

func shardList(ids []uint32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(uint64(id), 10)
	}
	return strings.Join(s, ",")
}

func (o *output) repairs(node string, rs []client.GroupRepair) error {
	if o.json {
		return o.emit(rs)
	}
	if len(rs) == 0 {
		fmt.Fprintf(o.w, "node %s has no damaged replicas\n", node)
		return nil
	}
	rows := make([][]string, len(rs))
	for i, r := range rs {
		rows[i] = []string{r.Group, r.Reason, r.Outcome}
	}
	return o.table("GROUP\tREASON\tOUTCOME", rows)
}

// movesJSON is QueueStats.Moves for --json: an object, empty rather than
// null when the server reported none.
func movesJSON(m map[string]uint64) map[string]uint64 {
	if m == nil {
		return map[string]uint64{}
	}
	return m
}
