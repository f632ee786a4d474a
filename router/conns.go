package router

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/bufpool"
)

// connPool keeps one gRPC client connection per peer address; gRPC
// multiplexes concurrent calls over it.
type connPool struct {
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newConnPool() *connPool { return &connPool{conns: map[string]*grpc.ClientConn{}} }

func (p *connPool) node(addr string) (raftqv1.NodeClient, error) {
	c, err := p.conn(addr)
	if err != nil {
		return nil, err
	}
	return raftqv1.NewNodeClient(c), nil
}

func (p *connPool) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A dead peer that sends no reset must not hold forwarded calls for
		// gRPC's default 20 s connect timeout.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		bufpool.DialOption())
	if err != nil {
		return nil, fmt.Errorf("dial peer %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

func (p *connPool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for addr, c := range p.conns {
		if err := c.Close(); err != nil && first == nil {
			first = fmt.Errorf("close peer %s: %w", addr, err)
		}
		delete(p.conns, addr)
	}
	return first
}
