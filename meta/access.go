package meta

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
)

// MaxAudit is how many audit records the meta state keeps: the newest;
// older ones live on in the nodes' log lines. Administrative calls are
// rare, so this covers weeks of a busy cluster while keeping the meta
// snapshot (one message) under a few MB.
const MaxAudit = 4096

// Limits on API keys, checked before proposing and again by the FSM.
const (
	MaxAPIKeys    = 10000
	MaxGrants     = 32
	maxKeyName    = 128
	maxPatternLen = 256
)

// The API key records and the audit trail (log format 5): the state
// server/auth.go authenticates and authorizes client calls with.

func (f *FSM) createAPIKey(c *metapb.CreateApiKey, nowMs int64) *metapb.Result {
	k := c.GetKey()
	if err := validateAPIKey(k); err != nil {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: err.Error()}
	}
	if _, ok := f.keys[k.GetId()]; ok {
		return &metapb.Result{Code: metapb.Code_CODE_EXISTS, Message: fmt.Sprintf("API key id %s exists", k.GetId())}
	}
	for _, o := range f.keys {
		if o.GetName() == k.GetName() {
			return &metapb.Result{Code: metapb.Code_CODE_EXISTS, Message: fmt.Sprintf("an API key named %q exists (id %s)", k.GetName(), o.GetId())}
		}
	}
	if tn := k.GetTenant(); tn != "" {
		if _, ok := f.tenants[tn]; !ok {
			return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("tenant %q not found", tn)}
		}
	}
	if len(f.keys) >= MaxAPIKeys {
		return &metapb.Result{Code: metapb.Code_CODE_REFUSED, Message: fmt.Sprintf("the cluster holds %d API keys, the most it keeps; revoke some first", MaxAPIKeys)}
	}
	k = proto.CloneOf(k)
	k.CreatedMs, k.RotatedMs = nowMs, 0
	f.keys[k.GetId()] = k
	return &metapb.Result{}
}

func (f *FSM) rotateAPIKey(c *metapb.RotateApiKey, nowMs int64) *metapb.Result {
	k, ok := f.keys[c.GetId()]
	if !ok {
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("no API key with id %s", c.GetId())}
	}
	if len(c.GetSecretSha256()) != 32 {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "secret hash must be 32 bytes"}
	}
	// Replace rather than mutate: readers hold clones, never k itself.
	k = proto.CloneOf(k)
	k.SecretSha256, k.RotatedMs = slices.Clone(c.GetSecretSha256()), nowMs
	f.keys[k.GetId()] = k
	return &metapb.Result{}
}

func (f *FSM) revokeAPIKey(c *metapb.RevokeApiKey) *metapb.Result {
	if _, ok := f.keys[c.GetId()]; !ok {
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("no API key with id %s", c.GetId())}
	}
	delete(f.keys, c.GetId())
	return &metapb.Result{}
}

func (f *FSM) appendAudit(c *metapb.AppendAudit) *metapb.Result {
	r := proto.CloneOf(c.GetRecord())
	if r == nil {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: "audit record required"}
	}
	r.Seq = max(f.nextAudit, 1)
	f.nextAudit = r.Seq + 1
	f.audit = append(f.audit, r)
	if n := len(f.audit) - MaxAudit; n > 0 {
		f.audit = slices.Delete(f.audit, 0, n)
	}
	return &metapb.Result{}
}

// ValidateGrant refuses a grant no key or certificate should carry.
func ValidateGrant(g *metapb.Grant) error {
	if g.GetRole() == metapb.Role_ROLE_UNSPECIFIED || metapb.Role_name[int32(g.GetRole())] == "" {
		return fmt.Errorf("grant: role %d is not admin, producer, consumer or viewer", g.GetRole())
	}
	p := g.GetQueues()
	if p == "" || len(p) > maxPatternLen || strings.ContainsAny(p, " \t\r\n") || strings.Contains(strings.TrimSuffix(p, "*"), "*") {
		return fmt.Errorf("grant: queue pattern %q: want a queue name, a prefix ending in '*', or '*'", p)
	}
	return nil
}

func validateAPIKey(k *metapb.ApiKey) error {
	if k.GetId() == "" || strings.ContainsAny(k.GetId(), "_ ") {
		return fmt.Errorf("API key id %q is malformed", k.GetId())
	}
	if n := k.GetName(); n == "" || len(n) > maxKeyName || strings.ContainsAny(n, " \t\r\n") {
		return fmt.Errorf("API key name %q: want 1-%d characters without spaces", n, maxKeyName)
	}
	if len(k.GetSecretSha256()) != 32 {
		return fmt.Errorf("API key %s: secret hash must be 32 bytes", k.GetId())
	}
	if len(k.GetGrants()) == 0 || len(k.GetGrants()) > MaxGrants {
		return fmt.Errorf("API key %q: want 1-%d grants, got %d", k.GetName(), MaxGrants, len(k.GetGrants()))
	}
	for _, g := range k.GetGrants() {
		if err := ValidateGrant(g); err != nil {
			return fmt.Errorf("API key %q: %w", k.GetName(), err)
		}
	}
	return nil
}

// APIKey returns a copy of the key with id, as this replica has applied it.
func (f *FSM) APIKey(id string) (*metapb.ApiKey, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	k, ok := f.keys[id]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(k), true
}

// APIKeys returns copies of every key, sorted by id.
func (f *FSM) APIKeys() []*metapb.ApiKey {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.apiKeysLocked()
}

func (f *FSM) apiKeysLocked() []*metapb.ApiKey {
	out := make([]*metapb.ApiKey, 0, len(f.keys))
	for _, k := range f.keys {
		out = append(out, proto.CloneOf(k))
	}
	slices.SortFunc(out, func(a, b *metapb.ApiKey) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out
}

// Audit returns copies of at most limit audit records with seq above
// after, oldest first.
func (f *FSM) Audit(after uint64, limit int) []*metapb.AuditRecord {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(f.audit, after+1, func(r *metapb.AuditRecord, seq uint64) int {
		switch {
		case r.GetSeq() < seq:
			return -1
		case r.GetSeq() > seq:
			return 1
		}
		return 0
	})
	var out []*metapb.AuditRecord
	for _, r := range f.audit[i:] {
		if len(out) >= limit {
			break
		}
		out = append(out, proto.CloneOf(r))
	}
	return out
}

// CreateAPIKey records a new key; ErrExists if its id or name is taken.
func (s *Store) CreateAPIKey(ctx context.Context, k *metapb.ApiKey) error {
	if err := validateAPIKey(k); err != nil {
		return fmt.Errorf("create API key: %w", refused(ErrInvalid, "%v", err))
	}
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_CreateApiKey{CreateApiKey: &metapb.CreateApiKey{Key: k}}}); err != nil {
		return fmt.Errorf("create API key %q: %w", k.GetName(), err)
	}
	return nil
}

// RotateAPIKey replaces the secret of key id; ErrNotFound without one.
func (s *Store) RotateAPIKey(ctx context.Context, id string, secretSHA256 []byte) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_RotateApiKey{RotateApiKey: &metapb.RotateApiKey{Id: id, SecretSha256: secretSHA256}}}); err != nil {
		return fmt.Errorf("rotate API key %s: %w", id, err)
	}
	return nil
}

// RevokeAPIKey deletes key id; ErrNotFound without one.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_RevokeApiKey{RevokeApiKey: &metapb.RevokeApiKey{Id: id}}}); err != nil {
		return fmt.Errorf("revoke API key %s: %w", id, err)
	}
	return nil
}

// AppendAudit records r (its seq is the FSM's to set).
func (s *Store) AppendAudit(ctx context.Context, r *metapb.AuditRecord) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_AppendAudit{AppendAudit: &metapb.AppendAudit{Record: r}}}); err != nil {
		return fmt.Errorf("append audit record: %w", err)
	}
	return nil
}
