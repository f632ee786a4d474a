package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/raftq/raftq/backup"
	"github.com/raftq/raftq/client"
)

// defaultBackupWithin bounds backup create unless --within says otherwise:
// the stream carries every message of the cluster.
const defaultBackupWithin = 10 * time.Minute

func backupCreateCommand() command {
	return command{"backup create", "", "take a consistent backup of meta and every shard into --out DIR (docs/backup.md, \"Back up\")", func(a *app, fs *flag.FlagSet) binder {
		out := fs.String("out", "", "directory to write the backup to: new or empty (required)")
		within := fs.Duration("within", defaultBackupWithin, "the backup must be complete within this (added to --timeout)")
		return func(pos []string) (action, error) {
			if err := exactly(pos); err != nil {
				return nil, err
			}
			if *out == "" {
				return nil, usagef("--out DIR is required")
			}
			if *within <= 0 {
				return nil, usagef("--within %v is not positive", *within)
			}
			if ents, err := os.ReadDir(*out); err == nil && len(ents) > 0 {
				return nil, usagef("%s is not empty: a backup goes into a new or empty directory", *out)
			}
			a.g.wait = *within
			return func(ctx context.Context, c *client.Client, o *output) error {
				w, err := backup.Create(*out)
				if err != nil {
					return err
				}
				if err := c.Backup(ctx, w); err != nil {
					w.Abort()
					return fmt.Errorf("%w; nothing was written to %s", err, *out)
				}
				if err := w.Commit(); err != nil {
					w.Abort()
					return fmt.Errorf("%w; nothing was written to %s", err, *out)
				}
				m, sums, err := backup.Verify(*out)
				if err != nil {
					return fmt.Errorf("the backup in %s does not verify: %w", *out, err)
				}
				return o.backup(*out, m, sums, "backed up")
			}, nil
		}
	}, false}
}

func backupVerifyCommand() command {
	return command{"backup verify", "DIR", "check a backup's checksums and that every piece decodes", func(a *app, fs *flag.FlagSet) binder {
		return func(pos []string) (action, error) {
			if err := exactly(pos, "DIR"); err != nil {
				return nil, err
			}
			return func(ctx context.Context, _ *client.Client, o *output) error {
				m, sums, err := backup.Verify(pos[0])
				if err != nil {
					var pe *backup.PieceError
					if errors.As(err, &pe) {
						return fmt.Errorf("backup %s is damaged: %w", pos[0], err)
					}
					return err
				}
				return o.backup(pos[0], m, sums, "verified")
			}, nil
		}
	}, true}
}

func (o *output) backup(dir string, m *backup.Manifest, sums []backup.PieceSummary, verb string) error {
	if o.json {
		return o.emit(map[string]any{"dir": dir, "manifest": m, "pieces": sums})
	}
	var msgs, bytes uint64
	rows := make([][]string, 0, len(sums))
	for _, s := range sums {
		msgs += s.Messages
		bytes += s.Bytes
		rows = append(rows, []string{s.Group, fmt.Sprint(s.Index), fmt.Sprint(s.Term), fmt.Sprint(s.Queues), fmt.Sprint(s.Messages), fmt.Sprint(s.Dedup), fmt.Sprint(s.Bytes)})
	}
	if _, err := fmt.Fprintf(o.w, "%s %s: cluster %s, %d shard(s), %d message(s), %d bytes\n", verb, dir, m.ClusterID, m.ShardCount, msgs, bytes); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return o.table("PIECE\tINDEX\tTERM\tQUEUES\tMESSAGES\tDEDUP\tBYTES", rows)
}
