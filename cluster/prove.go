package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// proveWait bounds one identity probe of a raft address.
const proveWait = 3 * time.Second

// proves reports whether addr holds the certificate of node id. Gossip
// tells where a member is, but under TLS gossip alone never puts an
// address into a raft configuration: a member that claims another's id
// (or a stale entry) fails the probe and nothing changes. Without TLS
// every address passes, as before.
func (n *Node) proves(ctx context.Context, id, addr string) bool {
	if id == n.cfg.NodeID {
		return true
	}
	if n.proofs.failedLately(id, addr) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, proveWait)
	defer cancel()
	if err := n.mux.Prove(ctx, addr, id); err != nil {
		n.proofs.fail(id, addr)
		n.logger.Warn("a raft address did not prove its node's identity; not used", "member", id, "raft", addr, "err", err)
		return false
	}
	return true
}

// proveBackoff is how long a failed proof stands before the address is
// dialed again: the meta and shard loops ask every round, and an address
// that swallows packets would cost each of them proveWait every time.
const proveBackoff = 10 * time.Second

// proofs remembers recent failed proofs.
type proofs struct {
	mu     sync.Mutex
	failed map[string]time.Time // id + " " + addr -> when
}

func (p *proofs) failedLately(id, addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.failed[id+" "+addr]
	return ok && time.Since(at) < proveBackoff
}

func (p *proofs) fail(id, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == nil {
		p.failed = map[string]time.Time{}
	}
	for k, at := range p.failed { // keep it small: only recent failures matter
		if time.Since(at) >= proveBackoff {
			delete(p.failed, k)
		}
	}
	p.failed[id+" "+addr] = time.Now()
}

// allProve is proves for every server of a configuration to be.
func (n *Node) allProve(ctx context.Context, servers []raft.Server) bool {
	for _, s := range servers {
		if !n.proves(ctx, string(s.ID), string(s.Address)) {
			return false
		}
	}
	return true
}
