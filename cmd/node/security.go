package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/server"
	"github.com/raftq/raftq/tlsconf"
)

// security is what secures a node's ports: the TLS material (nil with
// --insecure) and the gossip keys.
type security struct {
	tls        *tlsconf.Store
	gossipKeys [][]byte
}

// loadSecurity reads the files the config names.
func (c *config) loadSecurity() (*security, error) {
	if c.Insecure {
		return &security{}, nil
	}
	st, err := tlsconf.Load(tlsconf.Files{CA: c.TLSCA, Cert: c.TLSCert, Key: c.TLSKey})
	if err != nil {
		return nil, err
	}
	if id := st.Identity(); id != (tlsconf.Identity{Role: tlsconf.RoleNode, Name: c.NodeID}) {
		return nil, fmt.Errorf("--tls-cert %s is the certificate of %s, not of node %s: a node's id is bound to its certificate (raftq certs node --id %s)",
			c.TLSCert, id, c.NodeID, c.NodeID)
	}
	keys, err := readGossipKeys(c.GossipKeyFile)
	if err != nil {
		return nil, err
	}
	return &security{tls: st, gossipKeys: keys}, nil
}

// readGossipKeys reads a gossip key file: one base64 key (16, 24 or 32
// bytes) per line, the first encrypting, the rest only decrypting (a key
// being rotated in or out). Blank lines and # comments are skipped.
func readGossipKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		t := bytes.TrimSpace(sc.Bytes())
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(string(t))
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file %s line %d: not base64: %w", path, line, err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("--gossip-key-file %s line %d: a key is 16, 24 or 32 bytes, got %d", path, line, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--gossip-key-file %s holds no key", path)
	}
	return keys, nil
}

// catchHangup takes SIGHUP away from its default (ending the process)
// from the start, so a rotation signalled while a node is still starting
// does not kill it; reloadOnHangup serves the signals once the node runs.
func catchHangup() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// reloadOnHangup rereads the TLS files and the gossip keys on every SIGHUP
// until ctx ends. New handshakes use the new material; open connections
// keep theirs. Every file is read and checked before anything changes: one
// that fails to load changes nothing and is logged.
func reloadOnHangup(ctx context.Context, hup <-chan os.Signal, sec *security, c *config, node *cluster.Node, srv *server.Server, log *slog.Logger) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			if sec.tls == nil {
				log.Info("SIGHUP: nothing to reload (--insecure)")
				continue
			}
			keys, err := readGossipKeys(c.GossipKeyFile)
			if err == nil {
				err = sec.tls.Reload()
			}
			if err != nil {
				log.Error("SIGHUP: reload refused; the node keeps what it had", "err", err)
				continue
			}
			if err := node.SetGossipKeys(keys); err != nil {
				log.Error("SIGHUP: TLS certificates reloaded, gossip keys refused; the node keeps its old gossip keys", "err", err)
				continue
			}
			rk, err := server.NewReceiptKeys(keys)
			if err != nil {
				log.Error("SIGHUP: receipt keys refused; the node keeps its old ones", "err", err)
				continue
			}
			srv.SetReceiptKeys(rk)
			log.Info("SIGHUP: TLS certificates and gossip keys reloaded", "cert", c.TLSCert, "not_after", sec.tls.NotAfter())
			warnExpiry(log, sec.tls.NotAfter(), time.Now())
		}
	}()
}

// expiryWarning is how far ahead of its expiry a node's certificate is
// logged as due for rotation.
const expiryWarning = 30 * 24 * time.Hour

// warnExpiry logs a certificate that expires within expiryWarning.
func warnExpiry(log *slog.Logger, notAfter, now time.Time) {
	if left := notAfter.Sub(now); left < expiryWarning {
		log.Warn("the TLS certificate expires soon: issue a new one and SIGHUP the node (docs/security.md, \"Rotation\")",
			"not_after", notAfter, "left", left.Round(time.Minute))
	}
}

// --client-auth values.
const (
	clientAuthOptional = "optional"
	clientAuthRequire  = "require"
)

// errNoSecurity is the refusal of a node started with neither TLS nor
// --insecure.
var errNoSecurity = errors.New("TLS is required: pass --tls-ca, --tls-cert, --tls-key and --gossip-key-file " +
	"(make them with `raftq certs`; docs/security.md), or --insecure to run with every port open to anyone who reaches it")
