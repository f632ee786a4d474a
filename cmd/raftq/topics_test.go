package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
)

// Topic flags and arguments are checked before dialling, in flag names.
func TestTopicUsageErrors(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"topic"}, `"topic" needs a subcommand`},
		{[]string{"topic", "create"}, "want 1 argument(s) NAME, got 0"},
		{[]string{"topic", "create", "t", "--retention", "-1s"}, "--retention -1s is negative"},
		{[]string{"topic", "create", "t", "--retention", "400h"}, "--retention 400h0m0s is above the limit 336h0m0s"},
		{[]string{"topic", "create", "t", "--dedup-window", "0s"}, "--dedup-window 0s: give a positive duration (leave the flag out for the default 5m)"},
		{[]string{"topic", "create", "t", "--max-message-bytes", "0"}, "--max-message-bytes 0: give at least 1"},
		{[]string{"topic", "create", "t", "--max-size", "300000"}, "--max-size 300000 is above the limit 262144"},
		{[]string{"topic", "create", "t", "--visibility", "1s"}, "flag provided but not defined: -visibility"},
		{[]string{"topic", "get"}, "want 1 argument(s) NAME, got 0"},
		{[]string{"topic", "list", "x"}, "want 0 argument(s)"},
		{[]string{"topic", "delete", "a", "b"}, "want 1 argument(s) NAME, got 2"},
		{[]string{"topic", "subscribe", "orders"}, "want 2 argument(s) TOPIC NAME, got 1"},
		{[]string{"topic", "subscribe", "orders", "orders"}, `the subscription needs a name of its own, not its topic's "orders"`},
		{[]string{"topic", "subscribe", "orders", "billing", "--from", "yesterday"}, `--from "yesterday": want earliest, now or an RFC 3339 time`},
		{[]string{"topic", "subscribe", "orders", "billing", "--from", "2025-13-01T00:00:00Z"}, `--from "2025-13-01T00:00:00Z": want earliest`},
		{[]string{"topic", "subscribe", "orders", "billing", "--visibility", "0s"}, "--visibility 0s: give a positive duration"},
		{[]string{"topic", "subscribe", "orders", "billing", "--max-receives", "2000"}, "--max-receives 2000 is above the limit 1000"},
		// The mode, dedup window and size limit are the topic's.
		{[]string{"topic", "subscribe", "orders", "billing", "--fifo"}, "flag provided but not defined: -fifo"},
		{[]string{"topic", "subscribe", "orders", "billing", "--dedup-window", "1m"}, "flag provided but not defined: -dedup-window"},
		{[]string{"topic", "unsubscribe"}, "want 1 argument(s) NAME, got 0"},
		{[]string{"topic", "publish", "orders"}, "want 2 argument(s) TOPIC BODY, got 1"},
		{[]string{"topic", "publish", "orders", "b", "--priority", "10"}, "--priority 10 outside 0-9"},
		{[]string{"topic", "publish", "orders", "b", "--attr", "novalue"}, "want key=value"},
		{[]string{"topic", "publish", "orders", "b", "--delay", "0s"}, "--delay 0s: give a positive duration"},
		{[]string{"topic", "publish", "orders", "b", "--unique-until-done"}, "--unique-for and --unique-until-done need --dedup KEY"},
		{[]string{"topic", "publish", "orders", "b", "--run-at", "soon"}, `--run-at "soon" is not an RFC 3339 time`},
		{[]string{"topic", "update", "orders"}, "nothing to change: give --retention or --dedup-window"},
		{[]string{"topic", "update", "orders", "--retention", "400h"}, "--retention 400h0m0s is above the limit 336h0m0s"},
		{[]string{"topic", "filter", "billing"}, "want 2 argument(s) SUBSCRIPTION EXPR, got 1"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := raftq(t, nowhere, "", c.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", r.code, r.stderr, exitUsage, c.want)
			}
			if r.stdout != "" {
				t.Fatalf("usage error wrote to stdout: %q", r.stdout)
			}
		})
	}
}

func TestParseFrom(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"now":                           {},
		"earliest":                      client.ReplayEarliest,
		"2026-03-04T05:06:07Z":          at,
		"2026-03-04T06:06:07+01:00":     at,
		"2026-03-04T05:06:07.250Z":      at.Add(250 * time.Millisecond),
		"1970-01-01T00:00:00Z":          client.ReplayEarliest, // 0 on the wire would mean "now"
		"1960-01-01T00:00:00Z":          client.ReplayEarliest,
		"1970-01-01T00:00:00.002+00:00": time.UnixMilli(2),
	} {
		got, err := parseFrom(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseFrom(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "Earliest", "1h", "-1h", "2026-03-04", "2026-03-04 05:06:07"} {
		if _, err := parseFrom(in); err == nil {
			t.Errorf("parseFrom(%q) succeeded", in)
		}
	}
}

func TestTopicOutput(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	top := client.TopicInfo{
		QueueInfo: client.QueueInfo{Name: "orders", Created: created, Options: client.QueueOptions{
			FIFO: true, Topic: true, TopicRetention: time.Hour, DedupWindow: 5 * time.Minute, MaxMessageBytes: 1024}},
		Subscriptions: []client.QueueInfo{
			{Name: "orders-billing", Options: client.QueueOptions{FIFO: true, SubscriptionOf: "orders", Visibility: 30 * time.Second, MaxReceives: 5}},
			{Name: "orders-eu", Options: client.QueueOptions{FIFO: true, SubscriptionOf: "orders", Filter: "attr.region ^= eu-",
				ReplayFrom: client.ReplayEarliest, Visibility: time.Minute, MaxReceives: 10, DisableDLQ: true}},
		},
	}
	stats := &topicStats{retained: 9, subs: []client.QueueStats{{Ready: 3, Delayed: 1, InFlight: 2}, {Dead: 7}}}

	var b bytes.Buffer
	if err := (&output{w: &b}).topic(top, stats); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, row := range [][2]string{{"mode", "fifo"}, {"retention", "1h0m0s"}, {"subscriptions", "2"}, {"max-size", "1024"}, {"retained", "9"}} {
		if !hasRow(out, row[0], row[1]) {
			t.Errorf("topic table lacks %s %s:\n%s", row[0], row[1], out)
		}
	}
	for _, want := range []string{
		"SUBSCRIPTION    FILTER              FROM      VISIBILITY  MAX-RECEIVES  DLQ    BACKLOG  IN-FLIGHT  DEAD",
		"orders-billing  -                   now       30s         5             true   4        2          0",
		"orders-eu       attr.region ^= eu-  earliest  1m0s        10            false  0        0          7",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("topic table lacks line %q:\n%s", want, out)
		}
	}

	b.Reset()
	if err := (&output{w: &b, json: true}).topic(top, stats); err != nil {
		t.Fatal(err)
	}
	var js struct {
		Name          string `json:"name"`
		FIFO          bool   `json:"fifo"`
		RetentionMs   int64  `json:"retention_ms"`
		Retained      int    `json:"retained"`
		Subscriptions []struct {
			Name           string         `json:"name"`
			SubscriptionOf string         `json:"subscription_of"`
			Filter         string         `json:"filter"`
			ReplayFrom     string         `json:"replay_from"`
			Stats          map[string]int `json:"stats"`
		} `json:"subscriptions"`
	}
	if err := json.Unmarshal(b.Bytes(), &js); err != nil {
		t.Fatalf("topic --json: %v\n%s", err, b.String())
	}
	if js.Name != "orders" || !js.FIFO || js.RetentionMs != 3_600_000 || js.Retained != 9 || len(js.Subscriptions) != 2 ||
		js.Subscriptions[1].Filter != "attr.region ^= eu-" || js.Subscriptions[1].ReplayFrom != "earliest" ||
		js.Subscriptions[0].ReplayFrom != "now" || js.Subscriptions[0].SubscriptionOf != "orders" ||
		js.Subscriptions[0].Stats["ready"] != 3 || js.Subscriptions[1].Stats["dead"] != 7 {
		t.Fatalf("topic --json = %+v", js)
	}

	b.Reset()
	if err := (&output{w: &b}).topics([]client.TopicInfo{top, {QueueInfo: client.QueueInfo{Name: "quiet", Created: created}}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"orders  fifo      1h0m0s     orders-billing,orders-eu  2026-01-02T03:04:05.000Z",
		"quiet   standard  none       -                         2026-01-02T03:04:05.000Z",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("topic list lacks line %q:\n%s", want, b.String())
		}
	}

	// A subscription's queue view names its topic, filter and start.
	b.Reset()
	if err := (&output{w: &b}).queue(top.Subscriptions[1]); err != nil {
		t.Fatal(err)
	}
	if !hasRow(b.String(), "subscription-of", "orders") || !hasRow(b.String(), "from", "earliest") || !strings.Contains(b.String(), "filter                         attr.region ^= eu-") {
		t.Errorf("queue get of a subscription:\n%s", b.String())
	}
}

func TestPublishedOutput(t *testing.T) {
	for _, c := range []struct {
		r          client.SendResult
		text, json string
	}{
		{client.SendResult{ID: "2-a", Deliveries: 3}, "2-a delivered to 3 subscription(s)\n", `{"deduplicated":false,"deliveries":3,"id":"2-a"}`},
		{client.SendResult{ID: "2-a", Deduplicated: true}, "2-a (deduplicated: an earlier publish had this key; no new deliveries)\n", `{"deduplicated":true,"deliveries":0,"id":"2-a"}`},
	} {
		var b bytes.Buffer
		if err := (&output{w: &b}).published(c.r); err != nil || b.String() != c.text {
			t.Errorf("published(%+v) = %q, %v; want %q", c.r, b.String(), err, c.text)
		}
		b.Reset()
		if err := (&output{w: &b, json: true}).published(c.r); err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, b.Bytes()); err != nil || compact.String() != c.json {
			t.Errorf("published --json = %s, %v; want %s", compact.String(), err, c.json)
		}
	}
}
