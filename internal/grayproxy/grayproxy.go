// Package grayproxy is a TCP proxy for tests of gray failures: it can
// discard the bytes flowing one way, or both, while every connection stays
// open. The far side never sees a reset or a close, only silence, as
// behind a one-way network partition; unlike a partition, the kernel still
// acknowledges what it discards, so this tests what an application sees
// (calls that never get an answer), not TCP's own timeouts. Real one-way
// partitions are in jepsen-lite/netns.
package grayproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards every connection made to Addr to a target address.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener

	dropUp   atomic.Bool // client -> target
	dropDown atomic.Bool // target -> client

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// Start listens on a loopback port and forwards to target until t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("grayproxy: listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Drop starts or stops discarding what the client sends to the target
// (up) and what the target sends back (down). Drop(false, false) heals.
// Bytes discarded are gone: a stream cut mid-message is garbage to its
// reader once healed, which then closes the connection, as a real peer
// would after a long enough partition.
func (p *Proxy) Drop(up, down bool) {
	p.dropUp.Store(up)
	p.dropDown.Store(down)
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(out, in, &p.dropUp)
		go p.pump(in, out, &p.dropDown)
	}
}

// pump copies src to dst, discarding while drop is set; when either side
// ends it closes both.
func (p *Proxy) pump(dst, src net.Conn, drop *atomic.Bool) {
	defer p.wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !drop.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: either ends both
		}
	}
}
