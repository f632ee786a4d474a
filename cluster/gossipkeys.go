package cluster

import (
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// gossipKeyring is the keyring gossip starts with; nil without keys.
func gossipKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("gossip keys: %w", err)
	}
	return kr, nil
}

// SetGossipKeys installs a new set of gossip keys on a running node: the
// first encrypts from now on, every one decrypts, and keys not listed are
// dropped. To rotate without a partition: add the new key second on every
// node, then move it first on every node, then drop the old one.
func (n *Node) SetGossipKeys(keys [][]byte) error {
	kr := n.gossip.keyring
	if kr == nil {
		return errors.New("gossip keys: this node gossips in the clear (it started without keys); restart it with them")
	}
	if len(keys) == 0 {
		return errors.New("gossip keys: no key given; a running node cannot fall back to clear gossip")
	}
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("gossip keys: %w", err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("gossip keys: %w", err)
	}
	for _, old := range kr.GetKeys() {
		keep := false
		for _, k := range keys {
			keep = keep || string(k) == string(old)
		}
		if !keep {
			if err := kr.RemoveKey(old); err != nil {
				return fmt.Errorf("gossip keys: %w", err)
			}
		}
	}
	return nil
}
