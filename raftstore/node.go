package raftstore

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// nodeFileName is a node's identity, at the root of its data directory.
const nodeFileName = "node.json"

// Group registry states (NodeIdentity.Groups).
const (
	// GroupReady: the group's directory was created and must exist.
	GroupReady = "ready"
	// GroupRejoin: the group's replica was removed from its raft group for
	// repair; a fresh directory may be created, and it must join the group
	// through raft (never bootstrap it).
	GroupRejoin = "rejoin"
)

// GroupEntry is what node.json records of one group this node hosts.
type GroupEntry struct {
	State       string `json:"state"`
	Incarnation string `json:"incarnation,omitempty"`
	// Voter is, for a group being rejoined, whether the replica was a
	// voter before: it is promoted back once it has caught up.
	Voter bool `json:"voter,omitempty"`
}

// NodeIdentity is who a node is and which raft groups it has created, so a
// group directory that disappeared is noticed instead of recreated.
type NodeIdentity struct {
	Format      int       `json:"format"`
	NodeID      string    `json:"node_id"`
	Incarnation string    `json:"incarnation"`
	ClusterID   string    `json:"cluster_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	// Verified is set once the node knows it is not a member that lost its
	// state: it is new to its cluster, or its lost replicas were removed
	// from their groups. Until then it takes no part in raft.
	Verified bool                  `json:"verified"`
	Groups   map[string]GroupEntry `json:"groups"`
}

// Node is the identity of one node's data directory. Safe for concurrent
// use.
type Node struct {
	dir string
	// walSyncs times the fsyncs of every raft-wal segment of the node's
	// groups (synctimes.go).
	walSyncs SyncTimes

	mu sync.Mutex
	id *NodeIdentity // nil until Create for a fresh directory
}

// OpenNode reads dataDir's node identity. A directory without one is
// fresh only if it holds no raft state at all; one with state but no
// identity was written by an older raftq (or lost node.json) and is
// refused. A fresh Node must be created (Create) before groups open.
func OpenNode(dataDir, nodeID string) (*Node, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	id, err := readNode(dataDir)
	if err != nil {
		return nil, err
	}
	if id == nil {
		return &Node{dir: dataDir}, nil
	}
	if id.NodeID != nodeID {
		return nil, damage(dataDir, "node", ReasonForeign, filepath.Join(dataDir, nodeFileName), 0,
			"the data directory belongs to node %q, not %q", id.NodeID, nodeID)
	}
	return &Node{dir: dataDir, id: id}, nil
}

// readNode reads dataDir's node identity, changing nothing: nil for a
// fresh directory (no node.json and no raft state), a *DamageError for
// raft state without node.json or a node.json that does not parse.
func readNode(dataDir string) (*NodeIdentity, error) {
	path := filepath.Join(dataDir, nodeFileName)
	b, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		if found, err := anyRaftState(dataDir); err != nil {
			return nil, err
		} else if found != "" {
			return nil, damage(dataDir, "node", ReasonLegacy, found, 0,
				"the data directory holds raft state but no %s: it was written by a raftq without identity files, or node.json was lost", nodeFileName)
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	id := &NodeIdentity{}
	if err := json.Unmarshal(b, id); err != nil {
		return nil, damage(dataDir, "node", ReasonUnreadable, path, 0, "node identity does not parse: %v", err)
	}
	if id.Groups == nil {
		id.Groups = map[string]GroupEntry{}
	}
	return id, nil
}

// anyRaftState names a file under dir that only raft state would leave,
// or "".
func anyRaftState(dir string) (string, error) {
	found := ""
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch d.Name() {
		case "raft.db", "wal-meta.db", "state.bin", "meta.json", identityFileName:
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("look for raft state in %s: %w", dir, err)
	}
	return found, nil
}

// Fresh reports whether the directory has no node identity yet.
func (n *Node) Fresh() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id == nil
}

// Dir is the node's data directory.
func (n *Node) Dir() string { return n.dir }

// Create writes the identity of a fresh node; it is a no-op for a node
// that has one.
func (n *Node) Create(nodeID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.id != nil {
		return nil
	}
	id := &NodeIdentity{Format: FormatVersion, NodeID: nodeID, Incarnation: newIncarnation(),
		CreatedAt: time.Now().UTC(), Groups: map[string]GroupEntry{}}
	if err := n.writeLocked(id); err != nil {
		return err
	}
	n.id = id
	return nil
}

// Identity returns a copy of the node identity (nil for a fresh node).
func (n *Node) Identity() *NodeIdentity {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.id == nil {
		return nil
	}
	c := *n.id
	c.Groups = maps.Clone(n.id.Groups)
	return &c
}

// SetClusterID records the cluster this node belongs to. A node that
// already belongs to another cluster is refused.
func (n *Node) SetClusterID(clusterID string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.id == nil {
		return fmt.Errorf("node identity not created")
	}
	switch n.id.ClusterID {
	case clusterID:
		return nil
	case "":
	default:
		return damage(n.dir, "node", ReasonForeign, filepath.Join(n.dir, nodeFileName), 0,
			"this data directory belongs to cluster %s, not %s", n.id.ClusterID, clusterID)
	}
	c := *n.id
	c.ClusterID = clusterID
	if err := n.writeLocked(&c); err != nil {
		return err
	}
	n.id = &c
	return nil
}

// Verified reports whether the node's identity is settled (NodeIdentity).
func (n *Node) Verified() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id != nil && n.id.Verified
}

// SetVerified records whether the node's identity is settled.
func (n *Node) SetVerified(v bool) error {
	return n.update(func(id *NodeIdentity) { id.Verified = v })
}

// Rejoin records that group's replica on this node was (or is being)
// removed from its raft group and must come back as a new replica joining
// through raft: incarnation names it ("" for a new one, to be created
// fresh; the incarnation of a replica already created empty to keep it).
// voter says whether to promote it once it has caught up.
func (n *Node) Rejoin(group, incarnation string, voter bool) error {
	if incarnation == "" {
		incarnation = newIncarnation()
	}
	return n.update(func(id *NodeIdentity) {
		id.Groups[group] = GroupEntry{State: GroupRejoin, Incarnation: incarnation, Voter: voter}
	})
}

// Rejoined records that group's replica is back in its raft group with the
// suffrage it had.
func (n *Node) Rejoined(group string) error {
	return n.update(func(id *NodeIdentity) {
		e := id.Groups[group]
		e.State, e.Voter = GroupReady, false
		id.Groups[group] = e
	})
}

// Rejoining lists the groups being rejoined and whether each was a voter.
func (n *Node) Rejoining() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]bool{}
	if n.id == nil {
		return out
	}
	for g, e := range n.id.Groups {
		if e.State == GroupRejoin {
			out[g] = e.Voter
		}
	}
	return out
}

func (n *Node) update(edit func(*NodeIdentity)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.id == nil {
		return fmt.Errorf("node identity not created")
	}
	c := *n.id
	c.Groups = maps.Clone(n.id.Groups)
	edit(&c)
	if err := n.writeLocked(&c); err != nil {
		return err
	}
	n.id = &c
	return nil
}

// group returns the registry entry of group.
func (n *Node) group(group string) (GroupEntry, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.id == nil {
		return GroupEntry{}, false
	}
	e, ok := n.id.Groups[group]
	return e, ok
}

// Groups lists the groups the node has created, sorted.
func (n *Node) Groups() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.id == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(n.id.Groups))
}

// Forget drops group from the registry: its replica was moved off this
// node and its directory set aside, so a later replica of the group here
// is a new one, created empty.
func (n *Node) Forget(group string) error {
	if _, ok := n.group(group); !ok {
		return nil
	}
	return n.update(func(id *NodeIdentity) { delete(id.Groups, group) })
}

func (n *Node) setGroup(group string, e GroupEntry) error {
	if cur, ok := n.group(group); ok && cur == e {
		return nil
	}
	return n.update(func(id *NodeIdentity) { id.Groups[group] = e })
}

// markCreated records that group's replica directory now exists; a group
// being rejoined keeps its rejoin entry until it is promoted (Rejoined).
func (n *Node) markCreated(group, incarnation string) error {
	if cur, ok := n.group(group); ok && cur.State == GroupRejoin && cur.Incarnation == incarnation {
		return nil
	}
	return n.setGroup(group, GroupEntry{State: GroupReady, Incarnation: incarnation})
}

func (n *Node) writeLocked(id *NodeIdentity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("encode node identity: %w", err)
	}
	return writeFileSync(filepath.Join(n.dir, nodeFileName), append(b, '\n'))
}

// Discard moves a damaged replica's directory aside (dir.damaged-<time>),
// keeping its bytes for a post-mortem, so the group can be re-created
// empty. It returns where the directory went ("" if there was none).
func Discard(dir string) (string, error) {
	if ok, err := exists(dir); err != nil || !ok {
		return "", err
	}
	to := fmt.Sprintf("%s.damaged-%s", dir, time.Now().UTC().Format("20060102T150405.000000000"))
	if err := os.Rename(dir, to); err != nil {
		return "", fmt.Errorf("move damaged replica aside: %w", err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return "", err
	}
	return to, nil
}
