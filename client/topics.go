package client

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Topics and subscriptions (docs/topics.md). A topic and each of its
// subscriptions are queues with fan-out options: a send to the topic is a
// publish, delivered in one raft entry to every matching subscription of
// the shard it lands on; a subscription is consumed like any queue
// (Receive, the worker package, its own DLQ), with its own leases,
// retries and stats.

// ReplayEarliest, as SubscriptionOptions.From, replays everything the topic
// still retains.
var ReplayEarliest = time.UnixMilli(1)

// TopicOptions configures a topic.
type TopicOptions struct {
	// FIFO makes the topic and every subscription of it FIFO: each
	// subscription receives a group's messages in publish order.
	FIFO bool
	// Retention keeps each published message in the topic this long, for
	// subscriptions created later with From; 0 keeps none.
	Retention time.Duration
	// DedupWindow is how long a publish's dedup key suppresses another
	// publish with the same key; 0 = the default (5 min).
	DedupWindow time.Duration
	// MaxMessageBytes caps a published body; 0 = the default (256 KiB).
	MaxMessageBytes uint32
}

// SubscriptionOptions configures a subscription.
type SubscriptionOptions struct {
	// Filter selects the publications the subscription receives, for
	// example `type = order.placed and attr.region ^= eu-`; "" = all.
	Filter string
	// From replays the topic's retained messages published at or after
	// this time (ReplayEarliest: all of them); zero: only messages
	// published after the subscription is created.
	From time.Time
	// Delivery is the subscription's own policy as a queue: visibility
	// timeout, max receives, backoff, DLQ, retention, capacity. Its FIFO
	// is the topic's and its fan-out fields are set by Subscribe.
	Delivery QueueOptions
}

// TopicInfo describes a topic and its subscriptions.
type TopicInfo struct {
	QueueInfo
	Subscriptions []QueueInfo // by name
}

// CreateTopic creates a topic, or succeeds if it exists with the same
// options.
func (c *Client) CreateTopic(ctx context.Context, name string, o TopicOptions) (QueueInfo, error) {
	q, err := c.CreateQueue(ctx, name, QueueOptions{
		FIFO: o.FIFO, Topic: true, TopicRetention: o.Retention,
		DedupWindow: o.DedupWindow, MaxMessageBytes: o.MaxMessageBytes,
	})
	if err != nil {
		return QueueInfo{}, fmt.Errorf("create topic: %w", err)
	}
	return q, nil
}

// Subscribe creates subscription name of topic, or succeeds if it exists
// with the same options. Messages published after it returns reach it.
func (c *Client) Subscribe(ctx context.Context, topic, name string, o SubscriptionOptions) (QueueInfo, error) {
	t, err := c.GetQueue(ctx, topic)
	if err != nil {
		return QueueInfo{}, fmt.Errorf("subscribe %q: %w", name, err)
	}
	if !t.Options.Topic {
		return QueueInfo{}, fmt.Errorf("subscribe %q: %w", name, invalid(fmt.Sprintf("%q is a queue, not a topic", topic)))
	}
	d := o.Delivery
	d.FIFO = t.Options.FIFO
	d.Topic, d.TopicRetention = false, 0
	d.SubscriptionOf, d.Filter, d.ReplayFrom = topic, o.Filter, o.From
	q, err := c.CreateQueue(ctx, name, d)
	if err != nil {
		return QueueInfo{}, fmt.Errorf("subscribe %q to %q: %w", name, topic, err)
	}
	return q, nil
}

// Publish sends body to topic: a Send, so every SendOption applies (group,
// dedup key, delay, attributes, type). SendResult.Deliveries counts the
// subscriptions that received a copy.
func (c *Client) Publish(ctx context.Context, topic string, body []byte, opts ...SendOption) (SendResult, error) {
	return c.Send(ctx, topic, body, opts...)
}

// DeleteTopic deletes a topic. It is refused while the topic has
// subscriptions: delete them first (DeleteQueue).
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	return c.DeleteQueue(ctx, name)
}

// ListTopics lists every topic with its subscriptions.
func (c *Client) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	qs, err := c.ListQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	return topicsOf(qs), nil
}

// topicsOf groups queues into topics with their subscriptions, by name.
func topicsOf(qs []QueueInfo) []TopicInfo {
	idx := map[string]int{}
	var out []TopicInfo
	for _, q := range qs {
		if q.Options.Topic {
			idx[q.Name] = len(out)
			out = append(out, TopicInfo{QueueInfo: q})
		}
	}
	for _, q := range qs {
		if i, ok := idx[q.Options.SubscriptionOf]; ok {
			out[i].Subscriptions = append(out[i].Subscriptions, q)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for i := range out {
		s := out[i].Subscriptions
		sort.Slice(s, func(a, b int) bool { return s[a].Name < s[b].Name })
	}
	return out
}
