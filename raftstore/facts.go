package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// factsFile holds the durable facts of a replica: the highest term it has
// stored and the highest log index it has made durable (and so may have
// acknowledged to a leader). On start the stores must hold at least as
// much; a stable store or log that lost what it had is caught here instead
// of voting with a forgotten term or a shortened log.
//
// Layout: two 64-byte slots, written alternately; a record is
//
//	magic "RQFACTS1" | seq u64 | index u64 | term u64 | crc32c of the 32 bytes before
//
// so a torn write of one slot leaves the other. The newest valid slot wins.
const (
	factsFileName = "facts"
	factsMagic    = "RQFACTS1"
	factsSlot     = 64
	factsRecord   = 36
)

// Facts are a replica's durable facts.
type Facts struct {
	Index uint64 // highest log index made durable
	Term  uint64 // highest term stored
}

// factsWriter keeps the facts file of one replica. Raising the index is
// an atomic store on the append path, written in the background
// (flushEvery), so an append never waits for the facts file's fsync;
// raising the term and lowering the index are written at once, before the
// caller goes on.
type factsWriter struct {
	// index is the durable log index to record (noteIndex, lowerIndex).
	index atomic.Uint64

	mu      sync.Mutex // held while writing the file
	f       *os.File
	seq     uint64
	written Facts // on disk
	term    Facts // want.Term; Index unused
	err     error // first write error; later writes are refused

	// kick wakes the flush loop after noteIndex; an idle replica's loop
	// sleeps instead of ticking (128 idle groups ticking every 200 ms were
	// a tenth of a node's idle wakeups).
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

func encodeFacts(seq uint64, f Facts) []byte {
	b := make([]byte, factsRecord)
	copy(b, factsMagic)
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], f.Index)
	binary.LittleEndian.PutUint64(b[24:], f.Term)
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
	return b
}

func decodeFacts(b []byte) (seq uint64, f Facts, ok bool) {
	if len(b) < factsRecord || string(b[:8]) != factsMagic {
		return 0, Facts{}, false
	}
	if crc32.Checksum(b[:32], castagnoli) != binary.LittleEndian.Uint32(b[32:]) {
		return 0, Facts{}, false
	}
	return binary.LittleEndian.Uint64(b[8:]), Facts{Index: binary.LittleEndian.Uint64(b[16:]), Term: binary.LittleEndian.Uint64(b[24:])}, true
}

// readFacts returns the newest valid facts record of path and its sequence.
func readFacts(path string) (Facts, uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Facts{}, 0, err
	}
	var best Facts
	var bestSeq uint64
	found := false
	for off := 0; off+factsRecord <= len(b) && off < 2*factsSlot; off += factsSlot {
		if seq, f, ok := decodeFacts(b[off:]); ok && (!found || seq > bestSeq) {
			best, bestSeq, found = f, seq, true
		}
	}
	if !found {
		return Facts{}, 0, fmt.Errorf("%s: no valid facts record", path)
	}
	return best, bestSeq, nil
}

// createFacts writes a fresh facts file (both slots zero facts) durably.
func createFacts(path string) error {
	b := make([]byte, 2*factsSlot)
	copy(b, encodeFacts(1, Facts{}))
	copy(b[factsSlot:], encodeFacts(0, Facts{}))
	return writeFileSync(path, b)
}

func openFacts(path string, flushEvery time.Duration) (*factsWriter, error) {
	cur, seq, err := readFacts(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open facts: %w", err)
	}
	w := &factsWriter{f: f, seq: seq, written: cur, term: cur,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.index.Store(cur.Index)
	go w.flushLoop(flushEvery)
	return w, nil
}

// current is what the file says now.
func (w *factsWriter) current() Facts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// noteIndex records that the log is durable up to index; it reaches the
// file within flushEvery.
func (w *factsWriter) noteIndex(index uint64) {
	w.index.Store(index)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// noteTerm records a term raft has just stored, durably, before returning.
func (w *factsWriter) noteTerm(term uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if term <= w.term.Term {
		return w.err
	}
	w.term.Term = term
	return w.writeLocked()
}

// lowerIndex records, durably and before the caller deletes anything, that
// the log is about to end at index (raft is removing a conflicting tail).
// The caller orders it against noteIndex (checkedLogs.mu).
func (w *factsWriter) lowerIndex(index uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if index >= w.index.Load() && index >= w.written.Index {
		return w.err
	}
	w.index.Store(index)
	return w.writeLocked()
}

// writeLocked writes the wanted facts if they differ from the file's.
func (w *factsWriter) writeLocked() error {
	if w.err != nil {
		return w.err
	}
	want := Facts{Index: w.index.Load(), Term: w.term.Term}
	if want == w.written {
		return nil
	}
	w.seq++
	off := int64(w.seq%2) * factsSlot
	if _, err := w.f.WriteAt(encodeFacts(w.seq, want), off); err != nil {
		w.err = fmt.Errorf("write facts: %w", err)
		return w.err
	}
	if err := w.f.Sync(); err != nil {
		w.err = fmt.Errorf("sync facts: %w", err)
		return w.err
	}
	w.written = want
	return nil
}

// flushLoop writes a noted index flushEvery after it was noted, with
// whatever else is noted meanwhile.
func (w *factsWriter) flushLoop(every time.Duration) {
	defer close(w.done)
	t := time.NewTimer(every)
	t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
		}
		t.Reset(every)
		select {
		case <-w.stop:
			t.Stop()
			return
		case <-t.C:
		}
		w.mu.Lock()
		_ = w.writeLocked() // kept in w.err; the next synchronous write reports it
		w.mu.Unlock()
	}
}

// Close writes what is pending and closes the file.
func (w *factsWriter) Close() error {
	select {
	case <-w.stop:
		return nil
	default:
	}
	close(w.stop)
	<-w.done
	w.mu.Lock()
	err := w.writeLocked()
	w.mu.Unlock()
	return errors.Join(err, w.f.Close())
}
