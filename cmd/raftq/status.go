package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/raftq/raftq/client"
)

// errNotReady marks a cluster status without a leader for meta or for some
// shard: exit 3, as a cluster that cannot serve everything.
var errNotReady = errors.New("cluster not ready")

// statusPoll is how often cluster status --wait asks again.
const statusPoll = 250 * time.Millisecond

func statusCommand() command {
	return command{"cluster status", "", "show members and shard leaders; exit 3 until meta and every shard have a leader", func(a *app, fs *flag.FlagSet) binder {
		wait := fs.Duration("wait", 0, "wait up to this long for a node to answer and for meta and every shard to have a leader (added to --timeout)")
		caughtUp := fs.Bool("caught-up", false, "also require the node at the first --addr to have applied, on every shard it replicates, what the shard's leader had committed when asked (with --wait: wait for it); its own view is shown")
		return func(pos []string) (action, error) {
			if err := exactly(pos); err != nil {
				return nil, err
			}
			if *wait < 0 {
				return nil, usagef("--wait %v is negative", *wait)
			}
			a.g.wait, a.g.waitForNodes = *wait, *wait > 0
			return func(ctx context.Context, c *client.Client, o *output) error {
				deadline := time.Now().Add(*wait)
				st, err := awaitReady(ctx, c, *wait)
				if st == nil {
					return err
				}
				if err == nil && *caughtUp {
					var own *client.ClusterStatus
					own, err = awaitCaughtUp(ctx, c, a.g.seeds()[0], deadline)
					if own != nil {
						st = own
					}
				}
				if perr := o.status(st); perr != nil {
					return perr
				}
				return err
			}, nil
		}
	}, false}
}

// awaitReady asks for the status until it shows a ready cluster or wait
// passes, and returns the last status it got. The error says what is not
// ready, so a script waiting on the exit code is not told "ready" by a
// cluster still electing its leaders.
func awaitReady(ctx context.Context, c *client.Client, wait time.Duration) (*client.ClusterStatus, error) {
	deadline := time.Now().Add(wait)
	var last *client.ClusterStatus
	for {
		st, err := c.Status(ctx)
		if err == nil {
			last = st
			err = notReady(st)
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil && last != nil && errors.Is(err, errNotReady) && wait == 0 {
				err = fmt.Errorf("%w (cluster status --wait 30s waits for it)", err)
			}
			return last, err
		}
		t := time.NewTimer(statusPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, err
		case <-t.C:
		}
	}
}

// notReady says what in st has no leader, or nil.
func notReady(st *client.ClusterStatus) error {
	var missing []string
	if st.MetaLeaderID == "" {
		missing = append(missing, "meta has no leader")
	}
	if len(st.Shards) == 0 {
		missing = append(missing, "no shards placed yet")
	}
	for _, s := range st.Shards {
		if s.LeaderID == "" {
			missing = append(missing, fmt.Sprintf("shard %d has no leader", s.ID))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", errNotReady, strings.Join(missing, ", "))
}
