package main

import (
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tlsRecordHandshake is the first byte of every TLS connection (a
// handshake record); a plaintext HTTP/2 client starts with "PRI *".
const tlsRecordHandshake = 0x16

// sniffTimeout bounds how long an accepted connection may stay silent
// before its first byte decides which server gets it.
const sniffTimeout = 10 * time.Second

// splitTLS splits the connections accepted on ln by their first byte: TLS
// to the first listener, anything else to the second. The client port
// serves the real API on the first and, on the second, only a refusal
// that tells a plaintext client why (refusePlaintext): otherwise it would
// see a bare "connection closed" and guess.
func splitTLS(ln net.Listener) (tlsLn, plainLn net.Listener) {
	s := &splitter{ln: ln, done: make(chan struct{})}
	s.tls = &chanListener{s: s, ch: make(chan net.Conn)}
	s.plain = &chanListener{s: s, ch: make(chan net.Conn)}
	go s.acceptLoop()
	return s.tls, s.plain
}

type splitter struct {
	ln        net.Listener
	tls       *chanListener
	plain     *chanListener
	done      chan struct{}
	closeOnce sync.Once
}

func (s *splitter) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			s.close()
			return
		}
		if err != nil {
			// EMFILE and the like pass: the port must outlive a flood of
			// connections (gRPC's own accept loop backs off the same way).
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
				continue
			case <-s.done:
				return
			}
		}
		backoff = 0
		go s.route(c)
	}
}

func (s *splitter) route(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(sniffTimeout))
	var first [1]byte
	if _, err := c.Read(first[:]); err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	to := s.plain
	if first[0] == tlsRecordHandshake {
		to = s.tls
	}
	select {
	case to.ch <- &prefixConn{Conn: c, prefix: first[:]}:
	case <-s.done:
		_ = c.Close()
	}
}

func (s *splitter) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		_ = s.ln.Close()
	})
}

// chanListener is one side of a splitter; closing either closes both.
type chanListener struct {
	s  *splitter
	ch chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.s.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { l.s.close(); return nil }
func (l *chanListener) Addr() net.Addr { return l.s.ln.Addr() }

// prefixConn gives back the bytes the splitter read before the rest.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// refusePlaintext is the server behind the plaintext side of the client
// port: every call, whatever its method, is refused with the reason.
func refusePlaintext() *grpc.Server {
	return grpc.NewServer(
		grpc.MaxRecvMsgSize(4<<10),
		grpc.MaxConcurrentStreams(8),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(codes.Unauthenticated,
				"raftq: this node takes TLS connections only: connect with TLS (raftq --ca FILE, or client.WithTLS in Go)")
		}))
}
