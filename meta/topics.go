package meta

import (
	"fmt"
	"sort"
	"strings"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

// Topics and subscriptions are queues (docs/topics.md); the meta group
// keeps what holds between queues: a subscription's topic exists, is a
// topic, and has its mode and tenant; a topic with subscriptions is not
// deleted; and neither role changes after creation. Every meta replica
// checks alike, from its own state.

func modeOf(p *fsmpb.QueuePolicy) fsmpb.QueueMode {
	if p.GetMode() == fsmpb.QueueMode_QUEUE_MODE_UNSPECIFIED {
		return fsmpb.QueueMode_QUEUE_MODE_STANDARD
	}
	return p.GetMode()
}

// checkSubscription refuses a new subscription whose topic does not fit.
func (f *FSM) checkSubscription(name string, p *fsmpb.QueuePolicy) *metapb.Result {
	topic := p.GetSubscriptionOf()
	if topic == "" {
		return nil
	}
	t, ok := f.queues[topic]
	switch {
	case !ok:
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("topic %q not found", topic)}
	case !t.GetPolicy().GetTopic():
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("%q is a queue, not a topic", topic)}
	case fsm.TenantOf(name) != fsm.TenantOf(topic):
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("subscription %q and topic %q belong to different tenants", name, topic)}
	case modeOf(p) != modeOf(t.GetPolicy()):
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf("subscription %q must have the mode of topic %q (%s)", name, topic,
			strings.ToLower(strings.TrimPrefix(modeOf(t.GetPolicy()).String(), "QUEUE_MODE_")))}
	}
	return nil
}

// checkFixedRoles refuses an update that changes what a queue is.
func checkFixedRoles(name string, old, p *fsmpb.QueuePolicy) *metapb.Result {
	if old.GetTopic() != p.GetTopic() || old.GetSubscriptionOf() != p.GetSubscriptionOf() || old.GetReplayFromMs() != p.GetReplayFromMs() {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf(
			"queue %q: topic, subscription_of and replay_from_ms are fixed when it is created", name)}
	}
	if (old.GetTopic() || old.GetSubscriptionOf() != "") && modeOf(old) != modeOf(p) {
		// Its subscriptions, or its topic, keep the other mode: publishes
		// would reach none of them.
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: fmt.Sprintf(
			"queue %q: a topic's or a subscription's mode is fixed when it is created", name)}
	}
	return nil
}

// subscriptionsOf lists a topic's subscriptions by name.
func (f *FSM) subscriptionsOf(topic string) []string {
	var out []string
	for n, q := range f.queues {
		if q.GetPolicy().GetSubscriptionOf() == topic {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// checkTopicDelete refuses to delete a topic that has subscriptions: they
// would stop receiving without anyone deciding so.
func (f *FSM) checkTopicDelete(name string) *metapb.Result {
	subs := f.subscriptionsOf(name)
	if len(subs) == 0 {
		return nil
	}
	shown := subs
	if len(shown) > 5 {
		shown = append(shown[:5:5], "...")
	}
	return &metapb.Result{Code: metapb.Code_CODE_REFUSED, Message: fmt.Sprintf(
		"topic %q has %d subscriptions (%s): delete them first", name, len(subs), strings.Join(shown, ", "))}
}

// fanoutFormat is the format a queue command needs for its fan-out fields:
// a replica of format 7 would not check them and store a policy its shards
// cannot apply.
func fanoutFormat(c *metapb.Command) uint32 {
	if fsm.UsesFanout(policyOf(c)) {
		return 8
	}
	return 0
}
