package shard

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
	"google.golang.org/protobuf/proto"
)

func bigEnqueue(n, size int) *fsmpb.Command {
	msgs := make([]*fsmpb.NewMessage, n)
	for i := range msgs {
		body := bytes.Repeat([]byte{byte(i)}, size)
		msgs[i] = &fsmpb.NewMessage{Body: body, DedupKey: fmt.Sprintf("k%d", i)}
	}
	return enqueueCmd("q", msgs...)
}

func TestSplitEnqueueKeepsOrderWithinTheBound(t *testing.T) {
	cmd := bigEnqueue(100, 1000)
	parts := splitEnqueue(cmd, 16<<10)
	if len(parts) < 2 {
		t.Fatalf("%d parts for %d bytes", len(parts), proto.Size(cmd))
	}
	var joined []*fsmpb.NewMessage
	for i, p := range parts {
		if p.GetEnqueue().GetQueue() != "q" {
			t.Fatalf("part %d names queue %q", i, p.GetEnqueue().GetQueue())
		}
		if n := proto.Size(p); n > 16<<10+100 && len(p.GetEnqueue().GetMessages()) > 1 {
			t.Fatalf("part %d is %d bytes", i, n)
		}
		joined = append(joined, p.GetEnqueue().GetMessages()...)
	}
	want := cmd.GetEnqueue().GetMessages()
	if len(joined) != len(want) {
		t.Fatalf("parts hold %d messages, want %d", len(joined), len(want))
	}
	for i := range want {
		if joined[i] != want[i] {
			t.Fatalf("message %d out of order", i)
		}
	}
	// Not split: other commands, one message, and batches the FSM must
	// refuse whole.
	for name, c := range map[string]*fsmpb.Command{
		"ack":         ackCmd(&fsmpb.Receipt{MessageId: 1}),
		"one message": bigEnqueue(1, 100<<10),
		"over limit":  bigEnqueue(fsm.MaxEnqueueBatch+1, 100),
		"grouped":     grouped(bigEnqueue(100, 1000)),
	} {
		if p := splitEnqueue(c, 16<<10); p != nil {
			t.Fatalf("%s split into %d parts", name, len(p))
		}
	}
}

// grouped gives one message of cmd a group: the batch must stay whole.
func grouped(cmd *fsmpb.Command) *fsmpb.Command {
	cmd.GetEnqueue().GetMessages()[50].GroupId = "g"
	return cmd
}

func enqueueResult(ids ...uint64) *fsmpb.Result {
	r := &fsmpb.EnqueueResult{}
	for _, id := range ids {
		r.Items = append(r.Items, &fsmpb.EnqueueItemResult{Status: &fsmpb.Status{}, MessageId: id})
	}
	return &fsmpb.Result{Status: &fsmpb.Status{}, Body: &fsmpb.Result_Enqueue{Enqueue: r}}
}

func TestJoinParts(t *testing.T) {
	notFound := &fsmpb.Result{Status: &fsmpb.Status{Code: fsmpb.Code_CODE_QUEUE_NOT_FOUND, Message: "no q"}}
	refused := &raftgroup.NotLeaderError{LeaderID: "n2"}
	lost := fmt.Errorf("%w: leadership lost", raftgroup.ErrUnknownResult)
	ok, unavail, missing := fsmpb.Code_CODE_OK, fsmpb.Code_CODE_UNAVAILABLE, fsmpb.Code_CODE_QUEUE_NOT_FOUND
	for _, c := range []struct {
		name    string
		outs    []outcome
		ids     []uint64     // per item, 0 where it failed
		codes   []fsmpb.Code // per item
		whole   fsmpb.Code   // whole-command status when no items
		wantErr error
	}{
		{"all applied", []outcome{{res: enqueueResult(1, 2), n: 2}, {res: enqueueResult(3), n: 1}}, []uint64{1, 2, 3}, []fsmpb.Code{ok, ok, ok}, ok, nil},
		{"all refused alike", []outcome{{res: notFound, n: 2}, {res: notFound, n: 1}}, nil, nil, missing, nil},
		{"all not leader", []outcome{{err: refused, n: 1}, {err: refused, n: 2}}, nil, nil, ok, raftgroup.ErrNotLeader},
		{"all lost", []outcome{{err: lost, n: 1}, {err: lost, n: 2}}, nil, nil, ok, raftgroup.ErrUnknownResult},
		{"not leader, hints differ", []outcome{{err: &raftgroup.NotLeaderError{}, n: 1}, {err: refused, n: 2}, {err: &raftgroup.NotLeaderError{LeaderID: "n3", LeaderAddr: "a3"}, n: 1}, {err: &raftgroup.NotLeaderError{}, n: 1}}, nil, nil, ok, raftgroup.ErrNotLeader},
		{"not leader and lost", []outcome{{err: refused, n: 1}, {err: lost, n: 1}}, []uint64{0, 0}, []fsmpb.Code{unavail, unavail}, ok, nil},
		{"one part lost", []outcome{{res: enqueueResult(1), n: 1}, {err: lost, n: 2}}, []uint64{1, 0, 0}, []fsmpb.Code{ok, unavail, unavail}, ok, nil},
		{"gap", []outcome{{res: enqueueResult(1), n: 1}, {err: refused, n: 1}, {res: enqueueResult(2), n: 1}}, []uint64{1, 0, 2}, []fsmpb.Code{ok, unavail, ok}, ok, nil},
		{"parts disagree", []outcome{{res: enqueueResult(1), n: 1}, {res: notFound, n: 2}}, []uint64{1, 0, 0}, []fsmpb.Code{ok, missing, missing}, ok, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := joinParts(c.outs)
			if c.wantErr != nil {
				if !errors.Is(o.err, c.wantErr) {
					t.Fatalf("err = %v, want %v", o.err, c.wantErr)
				}
				if c.name == "not leader, hints differ" {
					var nl *raftgroup.NotLeaderError
					if !errors.As(o.err, &nl) || nl.LeaderID != "n3" || nl.LeaderAddr != "a3" {
						t.Fatalf("err = %v, want the last hint naming a leader (n3 at a3)", o.err)
					}
				}
				return
			}
			if o.err != nil {
				t.Fatalf("err = %v", o.err)
			}
			if got := o.res.GetStatus().GetCode(); got != c.whole {
				t.Fatalf("status %v, want %v", got, c.whole)
			}
			items := o.res.GetEnqueue().GetItems()
			if len(items) != len(c.codes) {
				t.Fatalf("%d items, want %d", len(items), len(c.codes))
			}
			for i, it := range items {
				if it.GetStatus().GetCode() != c.codes[i] || it.GetMessageId() != c.ids[i] {
					t.Fatalf("item %d: %v, want code %v id %d", i, it, c.codes[i], c.ids[i])
				}
			}
		})
	}
}

func TestLargeEnqueueTravelsAsSmallEntries(t *testing.T) {
	c := newCluster(t, 3, true, fastTuning())
	leader := c.leader()
	mustQueue(t, leader.sh, "q", standard(time.Minute))
	before := leader.sh.Raft().LastIndex()

	const n = 200
	cmd := bigEnqueue(n, 1000)
	res := mustPropose(t, leader.sh, cmd)
	items := res.GetEnqueue().GetItems()
	if len(items) != n {
		t.Fatalf("%d results for %d messages", len(items), n)
	}
	for i, it := range items {
		if it.GetStatus().GetCode() != fsmpb.Code_CODE_OK || it.GetMessageId() == 0 {
			t.Fatalf("item %d: %v", i, it)
		}
		if i > 0 && it.GetMessageId() != items[i-1].GetMessageId()+1 {
			t.Fatalf("ids not consecutive at %d: %d after %d", i, it.GetMessageId(), items[i-1].GetMessageId())
		}
		m, ok := leader.sh.FSM().Message(it.GetMessageId())
		if !ok || !bytes.Equal(m.GetBody(), cmd.GetEnqueue().GetMessages()[i].GetBody()) {
			t.Fatalf("message %d holds the wrong body", i)
		}
	}
	if entries := leader.sh.Raft().LastIndex() - before; entries < 200*1000/maxEntryBytes {
		t.Fatalf("%d KB enqueue went into %d log entries: not split", n, entries)
	}
	// Dedup across the parts and a repeat of the whole batch: every
	// message comes back deduplicated, with its first id.
	again := mustPropose(t, leader.sh, cmd).GetEnqueue().GetItems()
	for i, it := range again {
		if !it.GetDeduplicated() || it.GetMessageId() != items[i].GetMessageId() {
			t.Fatalf("repeat of message %d: %v, first id %d", i, it, items[i].GetMessageId())
		}
	}
	// The parts applied back to back: the batch leases in enqueue order.
	var last uint64
	for leased := 0; leased < n; {
		got := mustReceive(t, leader.sh, "q", 7, time.Minute)
		if len(got) == 0 {
			t.Fatalf("only %d of %d messages leasable", leased, n)
		}
		for _, m := range got {
			if m.GetId() <= last {
				t.Fatalf("message %d leased after %d", m.GetId(), last)
			}
			last = m.GetId()
		}
		leased += len(got)
		mustPropose(t, leader.sh, ackCmd(receipts(got)...))
	}
	c.converge()
}

func receipts(ms []*fsmpb.Message) []*fsmpb.Receipt {
	out := make([]*fsmpb.Receipt, len(ms))
	for i, m := range ms {
		out[i] = receiptOf(m)
	}
	return out
}
