package fsm

import "github.com/raftq/raftq/fsm/fsmpb"

// ValidateQueueName checks a queue name.
func ValidateQueueName(name string) error { return nil }

// ValidatePolicy checks a policy before defaults are filled.
func ValidatePolicy(p *fsmpb.QueuePolicy) error { return nil }

// NormalizePolicy returns a copy of p with defaults filled.
func NormalizePolicy(p *fsmpb.QueuePolicy) *fsmpb.QueuePolicy { return p }

// ValidateMessage checks a new message against a normalized policy.
func ValidateMessage(m *fsmpb.NewMessage, p *fsmpb.QueuePolicy) error { return nil }
