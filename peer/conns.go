package peer

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/internal/bufpool"
	"github.com/raftq/raftq/internal/liveness"
)

// peerConn is the connection to one peer and the watch on its liveness.
type peerConn struct {
	cc   *grpc.ClientConn
	live *liveness.Peer
}

// connPool keeps one gRPC client connection per address, with a liveness
// watch on it; gRPC multiplexes concurrent calls over it.
type connPool struct {
	probe liveness.Config
	creds credentials.TransportCredentials

	mu    sync.Mutex
	conns map[string]peerConn
}

func newConnPool(probe liveness.Config, creds credentials.TransportCredentials) *connPool {
	return &connPool{probe: probe, creds: creds, conns: map[string]peerConn{}}
}

func (p *connPool) conn(addr string) (*grpc.ClientConn, error) {
	pc, err := p.peer(addr)
	return pc.cc, err
}

func (p *connPool) peer(addr string) (peerConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pc, ok := p.conns[addr]; ok {
		return pc, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.creds),
		// A dead peer that sends no reset must not hold forwarded calls for
		// gRPC's default 20 s connect timeout.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		liveness.KeepaliveDialOption(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		bufpool.DialOption())
	if err != nil {
		return peerConn{}, fmt.Errorf("dial peer %s: %w", addr, err)
	}
	pc := peerConn{cc: c, live: liveness.New(c, p.probe)}
	p.conns[addr] = pc
	return pc, nil
}

func (p *connPool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for addr, pc := range p.conns {
		if err := pc.cc.Close(); err != nil && first == nil {
			first = fmt.Errorf("close peer %s: %w", addr, err)
		}
		delete(p.conns, addr)
	}
	return first
}
