package raftstore

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// identityFileName is a replica's identity, in its group directory.
const identityFileName = "replica.json"

// FormatVersion is the on-disk format this build writes: identity files,
// facts, and checksummed log entries. A replica without an identity file
// was written before it and is refused.
const FormatVersion = 1

// Replica states in replica.json.
const (
	// stateCreating: the directory is being set up and raft has never run
	// in it, so it has never voted or acknowledged anything; a restart may
	// wipe it and start again.
	stateCreating = "creating"
	stateReady    = "ready"
)

// ReplicaIdentity is who a replica is. It is written when its directory is
// created and checked on every open.
type ReplicaIdentity struct {
	Format      int       `json:"format"`
	NodeID      string    `json:"node_id"`
	Group       string    `json:"group"`
	Incarnation string    `json:"incarnation"`
	LogStore    string    `json:"log_store"`
	State       string    `json:"state"`
	CreatedAt   time.Time `json:"created_at"`
}

func newIncarnation() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; a constant would make two
		// incarnations look alike, so refuse loudly instead.
		panic(fmt.Sprintf("raftstore: random incarnation: %v", err))
	}
	return hex.EncodeToString(b[:])
}

func readIdentity(dir string) (*ReplicaIdentity, error) {
	path := filepath.Join(dir, identityFileName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	id := &ReplicaIdentity{}
	if err := json.Unmarshal(b, id); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return id, nil
}

func writeIdentity(dir string, id *ReplicaIdentity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encode identity: %w", err)
	}
	return writeFileSync(filepath.Join(dir, identityFileName), append(b, '\n'))
}
