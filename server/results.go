package server

import (
	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
)

// Job results (docs/jobs.md, "Job results and status"): an ack may carry
// one result per receipt, which the acked record keeps.

// checkAckResults refuses results that do not pair with the receipts or
// exceed fsm.MaxResultBytes, before anything is proposed.
func checkAckResults(req *raftqv1.AckRequest) error {
	rs := req.GetResults()
	if len(rs) != 0 && len(rs) != len(req.GetReceipts()) {
		return invalid("%d results for %d receipts: give none or one per receipt", len(rs), len(req.GetReceipts()))
	}
	for i, r := range rs {
		if len(r) > fsm.MaxResultBytes {
			return invalid("result %d is %d bytes, above the limit of %d (64 KiB)", i, len(r), fsm.MaxResultBytes)
		}
	}
	return nil
}

// partResults is the results of the receipts at items, nil when the
// request has none or every one of them is empty (an ack without results
// needs no newer log format).
func partResults(req *raftqv1.AckRequest, items []int) [][]byte {
	rs := req.GetResults()
	if len(rs) == 0 {
		return nil
	}
	out := make([][]byte, len(items))
	some := false
	for k, i := range items {
		out[k] = rs[i]
		some = some || len(rs[i]) > 0
	}
	if !some {
		return nil
	}
	return out
}
