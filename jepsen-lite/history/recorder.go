package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Recorder appends operations to a JSON-lines file and keeps them in memory
// for the checkers. It is safe for concurrent use.
type Recorder struct {
	start time.Time

	mu   sync.Mutex
	ops  []Op
	w    *bufio.Writer
	f    *os.File
	werr error
}

// NewRecorder writes to path (created or truncated).
func NewRecorder(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create history %s: %w", path, err)
	}
	return &Recorder{start: time.Now(), f: f, w: bufio.NewWriter(f)}, nil
}

// Start is when the recorder started: Op.Time counts from it.
func (r *Recorder) Start() time.Time { return r.start }

// Now is the monotonic time since the recorder started, in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Add stamps op with an index and the current time and records it.
func (r *Recorder) Add(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index = int64(len(r.ops))
	op.Time = int64(time.Since(r.start))
	r.ops = append(r.ops, op)
	if r.werr == nil {
		b, err := json.Marshal(op)
		if err == nil {
			b = append(b, '\n')
			_, err = r.w.Write(b)
		}
		r.werr = err
	}
	return op
}

// Ops returns a copy of everything recorded so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Close flushes the file and reports the first write error.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil && r.werr == nil {
		r.werr = err
	}
	if err := r.f.Close(); err != nil && r.werr == nil {
		r.werr = err
	}
	if r.werr != nil {
		return fmt.Errorf("write history: %w", r.werr)
	}
	return nil
}

// Read parses a JSON-lines history.
func Read(rd io.Reader) ([]Op, error) {
	var ops []Op
	dec := json.NewDecoder(rd)
	for {
		var op Op
		if err := dec.Decode(&op); err == io.EOF {
			return ops, nil
		} else if err != nil {
			return nil, fmt.Errorf("history line %d: %w", len(ops)+1, err)
		}
		ops = append(ops, op)
	}
}

// ReadFile parses the history at path.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open history: %w", err)
	}
	defer f.Close()
	return Read(f)
}
