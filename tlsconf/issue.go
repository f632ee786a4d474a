package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority able to issue node and client certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// NewCA makes a self-signed CA valid for validFor.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"raftq"}},
		NotBefore:             now.Add(-time.Hour), // tolerate a skewed clock
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA written by Save.
func LoadCA(certFile, keyFile string) (*CA, error) {
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cert, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	key, ok := kp.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("load CA: %s is not an ECDSA CA certificate", certFile)
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Certificate[0]})}, nil
}

// CertPEM is the CA certificate, for the CA file every party trusts.
func (ca *CA) CertPEM() []byte { return ca.pem }

// Save writes the CA's certificate and key (the key 0600).
func (ca *CA) Save(certFile, keyFile string) error {
	keyPEM, err := encodeKey(ca.key)
	if err != nil {
		return err
	}
	return writePair(certFile, ca.pem, keyFile, keyPEM)
}

// Request describes a certificate to issue.
type Request struct {
	Identity Identity
	// Hosts are DNS names and IP addresses clients may reach the holder
	// at; a node's certificate needs every name clients dial it by.
	Hosts    []string
	ValidFor time.Duration
	// Grants: what a client certificate's holder may do (grants.go).
	Grants []Grant
}

// Issue makes a key and a certificate for req, signed by ca, and returns
// both PEM encoded. A node certificate serves and dials (server and client
// auth); a client certificate only dials.
func (ca *CA) Issue(req Request) (certPEM, keyPEM []byte, err error) {
	if err := req.Identity.Validate(); err != nil {
		return nil, nil, err
	}
	if req.ValidFor <= 0 {
		return nil, nil, errors.New("issue: validity must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("issue key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Identity.Name, Organization: []string{"raftq " + string(req.Identity.Role)}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(req.ValidFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{req.Identity.URI()},
	}
	for _, g := range req.Grants {
		if _, err := ParseGrant(g.String()); err != nil {
			return nil, nil, err
		}
		tmpl.URIs = append(tmpl.URIs, g.uri())
	}
	if req.Identity.Role == RoleNode {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// IssueFiles issues req and writes the certificate and key under dir as
// NAME.crt and NAME.key, returning the Files a Store loads (with caFile).
func (ca *CA) IssueFiles(req Request, dir, name, caFile string) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(req)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: caFile, Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	return f, writePair(f.Cert, certPEM, f.Key, keyPEM)
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writePair writes the key first and both through a rename, so a node
// reloading on SIGHUP never reads half a file.
func writePair(certFile string, certPEM []byte, keyFile string, keyPEM []byte) error {
	if err := writeAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, certPEM, 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile keeps an existing file's mode
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	return s, nil
}
