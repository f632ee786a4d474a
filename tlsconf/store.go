// Package tlsconf loads a node's or a client's certificates from PEM files,
// builds the TLS configuration of each raftq listener and dialer from them,
// and reloads the files on request (a node does on SIGHUP) without dropping
// a connection: every handshake reads the material current at that moment.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Files names the PEM files of one party: the CA bundle it trusts and its
// own certificate chain and private key.
type Files struct {
	CA   string
	Cert string
	Key  string
}

// material is one consistent load of Files.
type material struct {
	cert *tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
	id   Identity
}

// Store holds the current material and swaps it whole on Reload.
type Store struct {
	files Files
	cur   atomic.Pointer[material]
}

// Load reads files and checks that they belong together: the certificate
// matches the key, chains to the CA, is valid now and carries an identity.
func Load(files Files) (*Store, error) {
	s := &Store{files: files}
	m, err := load(files)
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

// Reload reads the files again. On any error the material in use stays as
// it was, so a half-written rotation never takes a node's TLS down.
func (s *Store) Reload() error {
	m, err := load(s.files)
	if err != nil {
		return err
	}
	// An identity is bound to the process holding it (a node's id): a
	// rotation renews the certificate, it never changes who this is.
	if old := s.cur.Load().id; m.id != old {
		return fmt.Errorf("tls: the new certificate is that of %s, not %s: refused", m.id, old)
	}
	s.cur.Store(m)
	return nil
}

// Identity is the identity of the store's own certificate.
func (s *Store) Identity() Identity { return s.cur.Load().id }

// NotAfter is when the store's own certificate expires.
func (s *Store) NotAfter() time.Time { return s.cur.Load().leaf.NotAfter }

// Pool is the CA pool currently trusted.
func (s *Store) Pool() *x509.CertPool { return s.cur.Load().pool }

func load(f Files) (*material, error) {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: a CA file, a certificate file and a key file are all required")
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: load certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: parse %s: %w", f.Cert, err)
		}
	}
	if _, err := verifyChain(cert.Certificate, pool, x509.ExtKeyUsageAny); err != nil {
		return nil, fmt.Errorf("tls: %s does not chain to the CA in %s: %w", f.Cert, f.CA, err)
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return nil, fmt.Errorf("tls: %s: %w", f.Cert, err)
	}
	return &material{cert: &cert, leaf: leaf, pool: pool, id: id}, nil
}

// verifyChain checks a presented chain (leaf first, DER) against pool and
// returns the leaf.
func verifyChain(chain [][]byte, pool *x509.CertPool, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, errors.New("no certificate presented")
	}
	certs := make([]*x509.Certificate, len(chain))
	for i, der := range chain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, err
	}
	return certs[0], nil
}
