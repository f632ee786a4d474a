package raftmux

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Coalesced heartbeats. A quiet raft group (raftgroup/quiet.go) still
// heartbeats each follower several times a second, and one RPC per
// heartbeat costs a write and a read on both nodes: with 128 idle shards
// on 3 nodes that was most of what they cost. The heartbeats of a node's
// quiet groups to one peer node therefore travel together: each waits up
// to BeatWindow for the others, and the batch is one exchange on one
// connection per node pair. The peer hands every heartbeat to its group's
// raft heartbeat handler, exactly as raft's NetworkTransport does with a
// heartbeat it reads, and returns every answer in one reply. Raft sees
// an ordinary AppendEntries call that took up to BeatWindow longer.
//
// Only heartbeats go this way (raft's own test: no entries, no previous
// entry, no commit index), and only those of groups marked quiet
// (SetQuiet): a busy group's heartbeats, and a linearizable read's
// (VerifyLeader) on a busy group, are not delayed. A batch that fails on a
// connection that never completed one (a peer without coalesced
// heartbeats answers the connection's header by closing it) makes the
// link send heartbeats directly for beatFallback; any failed batch is
// retried directly at once, so no heartbeat is lost to the batching.
const (
	// BeatWindow is the longest a quiet group's heartbeat waits for others
	// to the same node.
	BeatWindow = 25 * time.Millisecond
	// beatsGroup is the reserved layer name of the batch connections; raft
	// groups are named "meta" and "shard-N".
	beatsGroup   = "raftmux-beats"
	beatTimeout  = 10 * time.Second
	beatFallback = 30 * time.Second
	// maxBeatBatch bounds a batch a peer may send.
	maxBeatBatch = 1 << 16
)

// errNoBeats tells the caller to send the heartbeat directly.
var errNoBeats = errors.New("raftmux: no coalesced heartbeats to this peer")

type beatItem struct {
	Group string
	Req   raft.AppendEntriesRequest
}

type beatReply struct {
	Resp raft.AppendEntriesResponse
	Err  string
}

// isHeartbeat is raft's NetworkTransport test for a heartbeat, which it
// hands to the heartbeat handler instead of raft's main loop, except that
// it wants the leader's address in the RPC header (raft since 1.3 puts it
// there; an older sender's heartbeats simply go directly).
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return req.Term != 0 && len(req.RPCHeader.Addr) != 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 &&
		len(req.Entries) == 0 && req.LeaderCommitIndex == 0
}

// beatHub sends and serves the coalesced heartbeats of one Mux.
type beatHub struct {
	mux    *Mux
	l      *layer
	window time.Duration

	batches atomic.Uint64 // batches served (tests)

	mu       sync.Mutex
	handlers map[string]*gatedTransport // group -> its transport, whose heartbeat handler serves it
	links    map[raft.ServerAddress]*beatLink
	closed   bool
}

func newBeatHub(m *Mux, window time.Duration) (*beatHub, error) {
	l, err := m.Layer(beatsGroup)
	if err != nil {
		return nil, err
	}
	h := &beatHub{mux: m, l: l.(*layer), window: window,
		handlers: make(map[string]*gatedTransport), links: make(map[raft.ServerAddress]*beatLink)}
	m.wg.Add(1)
	go h.serve()
	return h, nil
}

// close stops new batches and closes the outgoing connections; the layer
// (and the served connections) close with the Mux.
func (h *beatHub) close() {
	h.mu.Lock()
	h.closed = true
	links := h.links
	h.links = map[raft.ServerAddress]*beatLink{}
	h.mu.Unlock()
	for _, l := range links {
		// Not under ex: an exchange stuck on a silent peer fails at once
		// instead of holding Close for beatTimeout.
		l.mu.Lock()
		c := l.live
		l.mu.Unlock()
		if c != nil {
			_ = c.Close()
		}
	}
}

func (h *beatHub) register(group string, t *gatedTransport) {
	h.mu.Lock()
	h.handlers[group] = t
	h.mu.Unlock()
}

func (h *beatHub) unregister(group string, t *gatedTransport) {
	h.mu.Lock()
	if h.handlers[group] == t {
		delete(h.handlers, group)
	}
	h.mu.Unlock()
}

func (h *beatHub) serve() {
	defer h.mux.wg.Done()
	for {
		c, err := h.l.Accept()
		if err != nil {
			return
		}
		h.mux.wg.Add(1)
		go func() {
			defer h.mux.wg.Done()
			h.serveConn(c)
		}()
	}
}

// serveConn answers batches until the connection fails or closes.
func (h *beatHub) serveConn(c net.Conn) {
	defer c.Close()
	w := bufio.NewWriter(c)
	dec, enc := gob.NewDecoder(bufio.NewReader(c)), gob.NewEncoder(w)
	for {
		var batch []beatItem
		if err := dec.Decode(&batch); err != nil {
			return
		}
		if len(batch) > maxBeatBatch {
			h.mux.logger.Warn("coalesced heartbeat batch too large: closing", "remote", c.RemoteAddr().String(), "items", len(batch))
			return
		}
		h.batches.Add(1)
		replies := make([]beatReply, len(batch))
		for i := range batch {
			replies[i] = h.deliver(&batch[i])
		}
		_ = c.SetWriteDeadline(time.Now().Add(beatTimeout))
		if err := enc.Encode(replies); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

// deliver hands one heartbeat to its group's raft and returns the answer.
func (h *beatHub) deliver(it *beatItem) beatReply {
	if !isHeartbeat(&it.Req) {
		// The heartbeat handler runs off raft's main loop: only a
		// heartbeat may take that path.
		return beatReply{Err: fmt.Sprintf("raftmux: group %q: not a heartbeat", it.Group)}
	}
	h.mu.Lock()
	t := h.handlers[it.Group]
	h.mu.Unlock()
	fn := t.heartbeatHandler()
	if fn == nil {
		return beatReply{Err: fmt.Sprintf("raftmux: no raft group %q on this node", it.Group)}
	}
	ch := make(chan raft.RPCResponse, 1)
	fn(raft.RPC{Command: &it.Req, RespChan: ch})
	select {
	case res := <-ch:
		if res.Error != nil {
			return beatReply{Err: res.Error.Error()}
		}
		resp, ok := res.Response.(*raft.AppendEntriesResponse)
		if !ok || resp == nil {
			return beatReply{Err: fmt.Sprintf("raftmux: group %q: no heartbeat response", it.Group)}
		}
		return beatReply{Resp: *resp}
	default:
		// raft answers a heartbeat before its handler returns, except
		// when it is shutting down.
		return beatReply{Err: fmt.Sprintf("raftmux: group %q is shutting down", it.Group)}
	}
}

// send carries one heartbeat in the next batch to target; errNoBeats means
// send it directly.
func (h *beatHub) send(target raft.ServerAddress, group string, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errNoBeats
	}
	l := h.links[target]
	if l == nil {
		l = &beatLink{h: h, addr: target}
		h.links[target] = l
	}
	h.mu.Unlock()
	c := &beatCall{item: beatItem{Group: group, Req: *args}, resp: resp, done: make(chan error, 1)}
	l.mu.Lock()
	if time.Now().Before(l.directUntil) {
		l.mu.Unlock()
		return errNoBeats
	}
	l.pending = append(l.pending, c)
	if !l.armed {
		l.armed = true
		time.AfterFunc(h.window, l.flush)
	}
	l.mu.Unlock()
	return <-c.done
}

type beatCall struct {
	item beatItem
	resp *raft.AppendEntriesResponse
	done chan error // buffered: flush never blocks on it
}

// beatLink is the batches to one peer node.
type beatLink struct {
	h    *beatHub
	addr raft.ServerAddress

	mu          sync.Mutex
	pending     []*beatCall
	armed       bool      // a flush is scheduled
	directUntil time.Time // send directly until then
	live        net.Conn  // conn, for beatHub.close

	ex     sync.Mutex // one exchange at a time; guards the fields below
	conn   net.Conn
	w      *bufio.Writer
	enc    *gob.Encoder
	dec    *gob.Decoder
	proven bool // a batch completed on conn
}

// flush sends what is pending as one batch and answers every call.
func (l *beatLink) flush() {
	l.ex.Lock()
	defer l.ex.Unlock()
	l.mu.Lock()
	batch := l.pending
	l.pending, l.armed = nil, false
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	replies, err := l.exchange(batch)
	if err != nil {
		fresh := !l.proven
		l.closeConn()
		if fresh {
			l.mu.Lock()
			l.directUntil = time.Now().Add(beatFallback)
			l.mu.Unlock()
			l.h.mux.logger.Debug("coalesced heartbeats failed on a new connection: sending directly for a while",
				"peer", string(l.addr), "retry_in", beatFallback, "err", err)
		}
		for _, c := range batch {
			c.done <- errNoBeats
		}
		return
	}
	for i, c := range batch {
		if replies[i].Err != "" {
			c.done <- errors.New(replies[i].Err)
			continue
		}
		*c.resp = replies[i].Resp
		c.done <- nil
	}
}

func (l *beatLink) exchange(batch []*beatCall) ([]beatReply, error) {
	l.h.mu.Lock()
	closed := l.h.closed
	l.h.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if l.conn == nil {
		c, err := l.h.l.Dial(l.addr, beatTimeout)
		if err != nil {
			return nil, err
		}
		l.conn, l.w, l.proven = c, bufio.NewWriter(c), false
		l.enc, l.dec = gob.NewEncoder(l.w), gob.NewDecoder(bufio.NewReader(c))
		l.mu.Lock()
		l.live = c
		l.mu.Unlock()
		l.h.mu.Lock()
		closed := l.h.closed // close may have looked before live was set
		l.h.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
	}
	_ = l.conn.SetDeadline(time.Now().Add(beatTimeout))
	items := make([]beatItem, len(batch))
	for i, c := range batch {
		items[i] = c.item
	}
	if err := l.enc.Encode(items); err != nil {
		return nil, fmt.Errorf("send heartbeats to %s: %w", l.addr, err)
	}
	if err := l.w.Flush(); err != nil {
		return nil, fmt.Errorf("send heartbeats to %s: %w", l.addr, err)
	}
	var replies []beatReply
	if err := l.dec.Decode(&replies); err != nil {
		return nil, fmt.Errorf("heartbeat replies from %s: %w", l.addr, err)
	}
	if len(replies) != len(batch) {
		return nil, fmt.Errorf("heartbeat replies from %s: %d for %d heartbeats", l.addr, len(replies), len(batch))
	}
	l.proven = true
	return replies, nil
}

func (l *beatLink) closeConn() {
	if l.conn != nil {
		_ = l.conn.Close()
	}
	l.mu.Lock()
	l.live = nil
	l.mu.Unlock()
	l.conn, l.w, l.enc, l.dec, l.proven = nil, nil, nil, nil, false
}
