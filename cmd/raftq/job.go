package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/worker"
)

// errorTail is how much of a failed command's stderr becomes the nack's
// error text: the server keeps at most this much (fsm.MaxErrorLen,
// fsm/limits.go).
const errorTail = 1024

// errJobTimeout is the error of a command killed at --job-timeout; its
// text is what the message's history shows.
var errJobTimeout = errors.New("timeout")

// killWait bounds how long a finished or killed command's pipes may stay
// open (held by a grandchild that left the process group) before the
// worker stops copying them.
const killWait = time.Second

// jobRunner runs one command per message.
type jobRunner struct {
	queue          string
	argv           []string
	timeout        time.Duration // 0: none
	stdout, stderr io.Writer
	// resultFromStdout: the command's stdout, instead of passing through,
	// becomes the job's result (--result-from-stdout).
	resultFromStdout bool
}

// handle runs the command for m in a process group of its own: the body
// on stdin, m's fields in the environment (jobEnv), stdout and stderr
// passed through. Exit 0 acks; another exit nacks with the tail of
// stderr. At the timeout, or when the worker gives up on m (lease lost,
// drain over), the whole group is killed.
func (j *jobRunner) handle(ctx context.Context, m *worker.Message) error {
	if j.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, j.timeout, errJobTimeout)
		defer cancel()
	}
	tail := &tailWriter{max: errorTail}
	cmd := exec.CommandContext(ctx, j.argv[0], j.argv[1:]...)
	cmd.Stdin = bytes.NewReader(m.Body)
	cmd.Stdout = j.stdout
	var result *capWriter
	if j.resultFromStdout {
		result = &capWriter{max: client.MaxResultBytes}
		cmd.Stdout = result
	}
	cmd.Stderr = io.MultiWriter(j.stderr, tail)
	cmd.Env = append(os.Environ(), jobEnv(j.queue, m)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = killWait
	err := cmd.Run()
	switch {
	case err == nil && result != nil:
		// Done before any kill: the work is done, and its output is the
		// result; output past the limit fails the job rather than
		// passing for a result cut short.
		if result.over {
			return fmt.Errorf("stdout is more than %d bytes, the limit of a job result (--result-from-stdout)", client.MaxResultBytes)
		}
		return m.SetResult(result.buf)
	case err == nil:
		return nil // done before any kill: the work is done
	case errors.Is(context.Cause(ctx), errJobTimeout):
		return errJobTimeout
	case ctx.Err() != nil:
		return context.Cause(ctx) // the worker's own reason; it settles accordingly
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return fmt.Errorf("run %s: %w", j.argv[0], err)
	}
	if t := strings.TrimSpace(tail.String()); t != "" {
		return errors.New(t)
	}
	return fmt.Errorf("%s: %v", j.argv[0], exit)
}

// jobEnv is what a command learns of its message besides the body.
// Attributes come twice: as one JSON object, exact, and one variable
// each, named RAFTQ_ATTR_ and the key in upper case with every other
// character than A-Z, 0-9 and _ turned to _.
func jobEnv(queue string, m *worker.Message) []string {
	attrs, _ := json.Marshal(m.Attributes) // a map of strings always encodes
	env := []string{
		"RAFTQ_QUEUE=" + queue,
		"RAFTQ_MESSAGE_ID=" + m.ID,
		"RAFTQ_MESSAGE_TYPE=" + m.Type,
		"RAFTQ_GROUP_ID=" + m.Group,
		"RAFTQ_PRIORITY=" + strconv.FormatUint(uint64(m.Priority), 10),
		"RAFTQ_RECEIVE_COUNT=" + strconv.FormatUint(uint64(m.ReceiveCount), 10),
		"RAFTQ_LEASE_EPOCH=" + strconv.FormatUint(m.LeaseEpoch, 10),
		"RAFTQ_ENQUEUED_AT=" + ts(m.EnqueuedAt),
		"RAFTQ_LAST_ERROR=" + m.LastError,
		"RAFTQ_ATTRIBUTES=" + string(attrs),
	}
	// In key order, so when two keys map to one name (user-id, user_id)
	// the same one wins every time: the last, as exec keeps the last of
	// duplicate variables.
	for _, k := range slices.Sorted(maps.Keys(m.Attributes)) {
		env = append(env, "RAFTQ_ATTR_"+envName(k)+"="+m.Attributes[k])
	}
	return env
}

func envName(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			return r
		}
		return '_'
	}, key)
}

// capWriter keeps the first max bytes written to it and notes whether
// more came.
type capWriter struct {
	max  int
	buf  []byte
	over bool
}

// Write takes all of p, keeping what fits: a short write would end the
// command's output copy with an error instead of noting it is too long.
func (c *capWriter) Write(p []byte) (int, error) {
	keep := p
	if room := c.max - len(c.buf); len(p) > room {
		c.over = true
		keep = p[:max(room, 0)]
	}
	c.buf = append(c.buf, keep...)
	return len(p), nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is the tail, starting at a whole UTF-8 character.
func (t *tailWriter) String() string {
	b := t.buf
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string(b)
}
