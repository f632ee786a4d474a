package cluster

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/raftq/raftq/backup"
	"github.com/raftq/raftq/peer/peerpb"
)

// A restore keeps the backup's shard count: --shards may only repeat it,
// and a restore needs bootstrap-expect.
func TestRestoreConfig(t *testing.T) {
	src := &backup.Source{Manifest: &backup.Manifest{ShardCount: 2}}
	base := Config{NodeID: "n1", DataDir: t.TempDir(), RaftBind: "127.0.0.1:0", GossipBind: "127.0.0.1:0", BootstrapExpect: 3, Restore: src}
	for _, c := range []struct {
		shards uint32
		expect int
		want   uint32
		err    string
	}{
		{0, 3, 2, ""},
		{2, 3, 2, ""},
		{3, 3, 0, "the backup has 2 shards and Shards is 3"},
		{0, 0, 0, "needs BootstrapExpect"},
	} {
		cfg := base
		cfg.Shards, cfg.BootstrapExpect = c.shards, c.expect
		got, err := cfg.withDefaults()
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("shards %d expect %d: err %v, want %q", c.shards, c.expect, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("shards %d expect %d: %v", c.shards, c.expect, err)
		case c.err == "" && got.Shards != c.want:
			t.Errorf("shards %d expect %d: %d shards, want %d", c.shards, c.expect, got.Shards, c.want)
		}
	}
}

// Voters restoring another backup, or none, never count toward a
// bootstrap: each would seed its replicas from its own.
func TestBootstrapCandidatesNeedTheSameRestore(t *testing.T) {
	with := func(m member, restore string) member { m.meta.Restore = restore; return m }
	alive := []member{with(candidate("a", 3, false), "c1@t"), with(candidate("b", 3, false), "c1@t"), candidate("c", 3, false)}
	if _, verdict, detail := bootstrapCandidates(alive, 3, false, "c1@t"); verdict != tooFew || detail != "c" {
		t.Fatalf("a voter without the restore: %v %q, want tooFew naming c", verdict, detail)
	}
	alive[2] = with(alive[2], "c1@t")
	if _, verdict, _ := bootstrapCandidates(alive, 3, false, "c1@t"); verdict != bootstrapNow {
		t.Fatalf("all with the same restore: %v", verdict)
	}
}

// A piece is cut into chunks of at most BackupChunkBytes whose bytes and
// checksum are the piece's, however it is written.
func TestChunkWriter(t *testing.T) {
	var chunks []*peerpb.BackupChunk
	w := &chunkWriter{group: "shard-0", sum: sha256.New(), buf: make([]byte, 0, BackupChunkBytes),
		send: func(c *peerpb.BackupChunk) error {
			chunks = append(chunks, &peerpb.BackupChunk{Group: c.GetGroup(), Data: bytes.Clone(c.GetData())})
			return nil
		}}
	piece := bytes.Repeat([]byte("0123456789abcdef"), (5*BackupChunkBytes)/16+3)
	for rest, k := piece, 1; len(rest) > 0; k = k*3 + 1 {
		n := min(k, len(rest))
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, c := range chunks {
		if len(c.GetData()) > BackupChunkBytes || c.GetGroup() != "shard-0" {
			t.Fatalf("chunk of %d bytes for %q", len(c.GetData()), c.GetGroup())
		}
		got = append(got, c.GetData()...)
	}
	want := sha256.Sum256(piece)
	if !bytes.Equal(got, piece) || !bytes.Equal(w.sum.Sum(nil), want[:]) || w.size != uint64(len(piece)) || len(chunks) != 6 {
		t.Fatalf("%d chunks, %d bytes; want the piece's %d bytes in 6", len(chunks), len(got), len(piece))
	}
}
