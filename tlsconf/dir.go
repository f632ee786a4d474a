package tlsconf

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Dir is a directory of certificates in the layout `raftq certs` writes
// and raftq-node's --tls-* flags are pointed at:
//
//	ca.crt, ca.key          the CA (keep ca.key off the nodes in production)
//	gossip.key              gossip encryption keys, base64, one per line
//	ID.crt, ID.key          node ID's certificate
//	client-NAME.crt, .key   a client certificate
type Dir struct {
	Path string
	ca   *CA
}

// File names inside a Dir.
const (
	caCertName    = "ca.crt"
	caKeyName     = "ca.key"
	gossipKeyName = "gossip.key"
)

// ErrNoCA: the directory holds no CA yet.
var ErrNoCA = errors.New("no CA in the directory")

// OpenDir loads the CA of an existing directory.
func OpenDir(path string) (*Dir, error) {
	d := &Dir{Path: path}
	ca, err := LoadCA(d.CAFile(), filepath.Join(path, caKeyName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoCA)
	}
	if err != nil {
		return nil, err
	}
	d.ca = ca
	return d, nil
}

// InitDir makes a CA valid for caValid and a random 32-byte gossip key in
// path. It refuses a directory that already holds a CA: a new one would
// orphan every certificate the old one signed.
func InitDir(path string, caValid time.Duration) (*Dir, error) {
	d := &Dir{Path: path}
	if _, err := os.Stat(filepath.Join(path, caKeyName)); err == nil {
		return nil, fmt.Errorf("%s already holds a CA", path)
	}
	ca, err := NewCA("raftq CA", caValid)
	if err != nil {
		return nil, err
	}
	if err := ca.Save(d.CAFile(), filepath.Join(path, caKeyName)); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("gossip key: %w", err)
	}
	if err := writeAtomic(d.GossipKeyFile(), []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	d.ca = ca
	return d, nil
}

// OpenOrInitDir opens path, or initialises it if it holds no CA yet.
func OpenOrInitDir(path string, caValid time.Duration) (*Dir, error) {
	d, err := OpenDir(path)
	if errors.Is(err, ErrNoCA) {
		return InitDir(path, caValid)
	}
	return d, err
}

// CAFile is the CA certificate every party trusts.
func (d *Dir) CAFile() string { return filepath.Join(d.Path, caCertName) }

// GossipKeyFile is the file of gossip keys (raftq-node --gossip-key-file).
func (d *Dir) GossipKeyFile() string { return filepath.Join(d.Path, gossipKeyName) }

// NodeFiles are where node id's files are (they may not exist yet).
func (d *Dir) NodeFiles(id string) Files {
	return Files{CA: d.CAFile(), Cert: filepath.Join(d.Path, id+".crt"), Key: filepath.Join(d.Path, id+".key")}
}

// CheckNodeName refuses a node id whose files would be the CA's, the
// gossip key's or a client's.
func CheckNodeName(id string) error {
	if id == "ca" || id == "gossip" || strings.HasPrefix(id, "client-") {
		return fmt.Errorf("node id %q: its files would overwrite the CA, the gossip key or a client's certificate; choose another id", id)
	}
	return nil
}

// IssueNode writes node id's certificate, good for hosts, replacing any
// it had.
func (d *Dir) IssueNode(id string, hosts []string, valid time.Duration) (Files, error) {
	if err := CheckNodeName(id); err != nil {
		return Files{}, err
	}
	return d.ca.IssueFiles(Request{Identity: Identity{Role: RoleNode, Name: id}, Hosts: hosts, ValidFor: valid}, d.Path, id, d.CAFile())
}

// IssueClient writes a client certificate for name carrying grants.
func (d *Dir) IssueClient(name string, valid time.Duration, grants ...Grant) (Files, error) {
	return d.ca.IssueFiles(Request{Identity: Identity{Role: RoleClient, Name: name}, ValidFor: valid, Grants: grants}, d.Path, "client-"+name, d.CAFile())
}

// ClientFilesOf are where client name's files are (they may not exist yet).
func (d *Dir) ClientFilesOf(name string) Files {
	return Files{CA: d.CAFile(), Cert: filepath.Join(d.Path, "client-"+name+".crt"), Key: filepath.Join(d.Path, "client-"+name+".key")}
}

// EnsureClient issues client name's certificate unless its files exist.
func (d *Dir) EnsureClient(name string, valid time.Duration, grants ...Grant) (f Files, issued bool, err error) {
	f = d.ClientFilesOf(name)
	if _, err := os.Stat(f.Cert); err == nil {
		return f, false, nil
	}
	f, err = d.IssueClient(name, valid, grants...)
	return f, err == nil, err
}

// EnsureNode issues node id's certificate unless its files exist.
func (d *Dir) EnsureNode(id string, hosts []string, valid time.Duration) (f Files, issued bool, err error) {
	if err := CheckNodeName(id); err != nil {
		return Files{}, false, err
	}
	f = d.NodeFiles(id)
	if _, err := os.Stat(f.Cert); err == nil {
		return f, false, nil
	}
	f, err = d.IssueNode(id, hosts, valid)
	return f, err == nil, err
}
