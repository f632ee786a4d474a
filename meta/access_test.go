package meta

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
)

func keyCmd(id, name string, hash byte, grants ...*metapb.Grant) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_CreateApiKey{CreateApiKey: &metapb.CreateApiKey{Key: &metapb.ApiKey{
		Id: id, Name: name, SecretSha256: bytes.Repeat([]byte{hash}, 32), Grants: grants}}}}
}

func grant(r metapb.Role, q string) *metapb.Grant { return &metapb.Grant{Role: r, Queues: q} }

func TestFSM_APIKeys(t *testing.T) {
	f := NewFSM(nil)
	if res := applyAt(t, f, 1, 100, keyCmd("k1", "billing", 1, grant(metapb.Role_ROLE_PRODUCER, "orders.*"))); res.GetCode() != metapb.Code_CODE_OK {
		t.Fatalf("create: %v", res)
	}
	for _, c := range []struct {
		cmd  *metapb.Command
		code metapb.Code
		msg  string
	}{
		{keyCmd("k1", "other", 2, grant(metapb.Role_ROLE_ADMIN, "*")), metapb.Code_CODE_EXISTS, "id k1 exists"},
		{keyCmd("k2", "billing", 2, grant(metapb.Role_ROLE_ADMIN, "*")), metapb.Code_CODE_EXISTS, `named "billing"`},
		{keyCmd("k2", "x", 2), metapb.Code_CODE_INVALID, "grants"},
		{keyCmd("k2", "x", 2, grant(metapb.Role_ROLE_UNSPECIFIED, "*")), metapb.Code_CODE_INVALID, "role"},
		{keyCmd("k2", "x", 2, grant(metapb.Role_ROLE_VIEWER, "a*b")), metapb.Code_CODE_INVALID, "pattern"},
		{&metapb.Command{Cmd: &metapb.Command_RevokeApiKey{RevokeApiKey: &metapb.RevokeApiKey{Id: "nope"}}}, metapb.Code_CODE_NOT_FOUND, "no API key"},
		{&metapb.Command{Cmd: &metapb.Command_RotateApiKey{RotateApiKey: &metapb.RotateApiKey{Id: "k1", SecretSha256: []byte{1}}}}, metapb.Code_CODE_INVALID, "32 bytes"},
	} {
		res := applyAt(t, f, f.AppliedIndex()+1, 200, c.cmd)
		if res.GetCode() != c.code || !strings.Contains(res.GetMessage(), c.msg) {
			t.Errorf("%v: got %v %q, want %v containing %q", c.cmd, res.GetCode(), res.GetMessage(), c.code, c.msg)
		}
	}
	k, ok := f.APIKey("k1")
	if !ok || k.GetCreatedMs() != 100 || k.GetSecretSha256()[0] != 1 || len(f.APIKeys()) != 1 {
		t.Fatalf("key after refused commands: %v %v", k, f.APIKeys())
	}
	rot := &metapb.Command{Cmd: &metapb.Command_RotateApiKey{RotateApiKey: &metapb.RotateApiKey{Id: "k1", SecretSha256: bytes.Repeat([]byte{9}, 32)}}}
	applyAt(t, f, f.AppliedIndex()+1, 300, rot)
	if k, _ := f.APIKey("k1"); k.GetSecretSha256()[0] != 9 || k.GetRotatedMs() != 300 || k.GetCreatedMs() != 100 {
		t.Fatalf("rotated key: %v", k)
	}
	applyAt(t, f, f.AppliedIndex()+1, 400, &metapb.Command{Cmd: &metapb.Command_RevokeApiKey{RevokeApiKey: &metapb.RevokeApiKey{Id: "k1"}}})
	if _, ok := f.APIKey("k1"); ok {
		t.Fatal("revoked key still found")
	}
}

func TestFSM_AuditKeepsTheNewest(t *testing.T) {
	f := NewFSM(nil)
	for i := range MaxAudit + 10 {
		applyAt(t, f, uint64(i+1), 1, &metapb.Command{Cmd: &metapb.Command_AppendAudit{AppendAudit: &metapb.AppendAudit{
			Record: &metapb.AuditRecord{Method: "Queues/PurgeQueue", Seq: 999}}}})
	}
	all := f.Audit(0, MaxAudit*2)
	if len(all) != MaxAudit || all[0].GetSeq() != 11 || all[len(all)-1].GetSeq() != MaxAudit+10 {
		t.Fatalf("kept %d records, seq %d..%d; want %d, 11..%d", len(all), all[0].GetSeq(), all[len(all)-1].GetSeq(), MaxAudit, MaxAudit+10)
	}
	page := f.Audit(100, 5)
	if len(page) != 5 || page[0].GetSeq() != 101 {
		t.Fatalf("page after 100: %v", page)
	}
	if got := f.Audit(MaxAudit+10, 5); len(got) != 0 {
		t.Fatalf("after the newest: %v", got)
	}

	// Keys and the trail survive a snapshot, and the next seq continues.
	applyAt(t, f, f.AppliedIndex()+1, 1, keyCmd("k1", "ops", 3, grant(metapb.Role_ROLE_ADMIN, "*")))
	snap, _ := f.Snapshot()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM(nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(f.snapshotProto(), g.snapshotProto()) {
		t.Fatal("restored keys or audit differ")
	}
	applyAt(t, g, g.AppliedIndex()+1, 1, &metapb.Command{Cmd: &metapb.Command_AppendAudit{AppendAudit: &metapb.AppendAudit{Record: &metapb.AuditRecord{}}}})
	if last := g.Audit(MaxAudit+10, 1); len(last) != 1 || last[0].GetSeq() != MaxAudit+11 {
		t.Fatalf("seq after restore: %v", last)
	}
}
