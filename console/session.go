package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/raftq/raftq/client"
)

// session is one browser's: the API key it logged in with (none when
// anonymous), the client dialed with it, and its CSRF token.
type session struct {
	id        string
	csrf      string
	principal client.Principal
	cl        *client.Client // nil: anonymous, uses the console's shared client
	loggedIn  bool
	expires   time.Time
	lastUsed  time.Time
	flash     flash
}

type flash struct {
	Notice, Error string
}

// errTooManySessions refuses a new session past Options.MaxSessions.
var errTooManySessions = errors.New("too many console sessions")

// sessions is a bounded set of sessions, each held in the browser only as
// a random id in the console's cookie (the API key stays here). A session
// ends ttl after it began or idle after its last request. Past the bound
// an anonymous session (it holds no key and costs nothing to make again)
// is evicted, least recently used first; a principal's new login past
// perPrincipal ends its own least recently used one; other logged-in
// sessions are never evicted, so with the set full of them a new login is
// refused until one logs out or ends.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	lim sessionLimits
	now func() time.Time
}

type sessionLimits struct {
	max, perPrincipal int
	ttl, idle         time.Duration
}

func newSessions(lim sessionLimits, now func() time.Time) *sessions {
	return &sessions{m: make(map[string]*session), lim: lim, now: now}
}

// endedLocked: past its lifetime, or unused for too long.
func (s *sessions) endedLocked(se *session, now time.Time) bool {
	return now.After(se.expires) || now.Sub(se.lastUsed) > s.lim.idle
}

func randomID() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// get returns the live session id names, or nil.
func (s *sessions) get(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.m[id]
	if se == nil {
		return nil
	}
	now := s.now()
	if s.endedLocked(se, now) {
		s.dropLocked(se)
		return nil
	}
	se.lastUsed = now
	return se
}

// create adds a session: logged in with cl and p, or anonymous (cl nil).
func (s *sessions) create(cl *client.Client, p client.Principal, loggedIn bool) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if loggedIn {
		s.capPrincipalLocked(p.Name)
	}
	if len(s.m) >= s.lim.max {
		s.pruneLocked(now)
	}
	if len(s.m) >= s.lim.max {
		return nil, errTooManySessions
	}
	se := &session{id: randomID(), csrf: randomID(), principal: p, cl: cl, loggedIn: loggedIn, expires: now.Add(s.lim.ttl), lastUsed: now}
	s.m[se.id] = se
	return se, nil
}

// capPrincipalLocked ends the least recently used logged-in sessions of
// name until a new one fits within perPrincipal.
func (s *sessions) capPrincipalLocked(name string) {
	for {
		var n int
		var lru *session
		for _, se := range s.m {
			if se.loggedIn && se.principal.Name == name {
				n++
				if lru == nil || se.lastUsed.Before(lru.lastUsed) {
					lru = se
				}
			}
		}
		if n < s.lim.perPrincipal {
			return
		}
		s.dropLocked(lru)
	}
}

// pruneLocked drops ended sessions and then, while still full, the least
// recently used anonymous one.
func (s *sessions) pruneLocked(now time.Time) {
	for _, se := range s.m {
		if s.endedLocked(se, now) {
			s.dropLocked(se)
		}
	}
	for len(s.m) >= s.lim.max {
		var lru *session
		for _, se := range s.m {
			if !se.loggedIn && (lru == nil || se.lastUsed.Before(lru.lastUsed)) {
				lru = se
			}
		}
		if lru == nil {
			return
		}
		s.dropLocked(lru)
	}
}

// pruneExpired ends the ended sessions, closing their clients.
func (s *sessions) pruneExpired() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, se := range s.m {
		if s.endedLocked(se, now) {
			s.dropLocked(se)
		}
	}
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se := s.m[id]; se != nil {
		s.dropLocked(se)
	}
}

func (s *sessions) dropLocked(se *session) {
	delete(s.m, se.id)
	if se.cl != nil {
		_ = se.cl.Close()
	}
}

// newest is the client of the most recently used logged-in session, for
// the sampler; nil if none.
func (s *sessions) newest() *client.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var best *session
	for _, se := range s.m {
		if se.cl != nil && !s.endedLocked(se, now) && (best == nil || se.lastUsed.After(best.lastUsed)) {
			best = se
		}
	}
	if best == nil {
		return nil
	}
	return best.cl
}

func (s *sessions) setFlash(se *session, f flash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se.flash = f
}

func (s *sessions) takeFlash(se *session) flash {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := se.flash
	se.flash = flash{}
	return f
}

func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *sessions) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, se := range s.m {
		s.dropLocked(se)
	}
}

// csrfOK compares a form's token with the session's in constant time.
func (se *session) csrfOK(tok string) bool {
	return tok != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(se.csrf)) == 1
}
