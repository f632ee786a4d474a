package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/raftq/raftq/client"
)

// Job results (docs/jobs.md, "Job results and status"): ack a job with a
// result, and wait for a job to finish.

// errJobDead is message wait's failure for a job that ended dead.
var errJobDead = errors.New("job dead")

// defaultMessageWait is how long message wait waits unless told.
const defaultMessageWait = 10 * time.Minute

// ackResultCommand acks one receipt with a result; plain acks of many
// receipts stay with the ack command.
func ackResultCommand() command {
	return command{"ack-result", "RECEIPT RESULT", `acknowledge a leased message with a job result, at most 64 KiB (RESULT "-" reads stdin)`, func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos, "RECEIPT", "RESULT"); err != nil {
				return nil, err
			}
			result := []byte(pos[1])
			if pos[1] == "-" {
				var err error
				if result, err = io.ReadAll(io.LimitReader(a.stdin, client.MaxResultBytes+1)); err != nil {
					return nil, fmt.Errorf("read result from stdin: %w", err)
				}
			}
			if len(result) > client.MaxResultBytes {
				return nil, usagef("RESULT is above the limit of %d bytes (64 KiB)", client.MaxResultBytes)
			}
			return func(ctx context.Context, c *client.Client, o *output) error {
				if err := c.AckWithResult(ctx, pos[0], result); err != nil {
					return err
				}
				return o.done(fmt.Sprintf("acked with a %d-byte result", len(result)), map[string]any{"acked": pos[0], "result_bytes": len(result)})
			}, nil
		}
	}, false}
}

// messageWaitCommand waits for a job to finish and prints its record. The
// exit code says how it ended: 0 acked, 1 dead, 3 still unfinished when
// the wait ran out (a deadline, like any other).
func messageWaitCommand() command {
	return command{"message wait", "QUEUE ID", "wait until a message is acked or dead, then show its record and result (exit 1 if dead, 3 if not finished within --wait)", func(a *app, fs *flag.FlagSet) binder {
		wait := fs.Duration("wait", defaultMessageWait, "how long to wait for the job to finish (added to --timeout)")
		return func(pos []string) (action, error) {
			if err := exactly(pos, "QUEUE", "ID"); err != nil {
				return nil, err
			}
			if *wait <= 0 {
				return nil, usagef("--wait %v is not positive", *wait)
			}
			a.g.wait = *wait
			return func(ctx context.Context, c *client.Client, o *output) error {
				wctx, cancel := context.WithTimeout(ctx, *wait)
				defer cancel()
				m, err := c.Wait(wctx, pos[0], pos[1])
				if m == nil || (err != nil && wctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded)) {
					return err
				}
				if perr := o.message(m); perr != nil {
					return perr
				}
				switch {
				case err != nil:
					return &reportedError{err: err, msg: fmt.Sprintf("message %s still %s after --wait %v", m.ID, m.State, *wait)}
				case m.State == "dead":
					return &reportedError{err: errJobDead, msg: fmt.Sprintf("message %s is dead: %s", m.ID, m.DeadReason)}
				}
				return nil
			}, nil
		}
	}, false}
}
