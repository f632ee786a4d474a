package main

import (
	"errors"
	"os"

	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/tlsconf"
)

// devCA is where `make run` (raftq certs dev) keeps its development CA:
// the CLI run from the repository trusts it without being told.
const devCA = "data/certs/ca.crt"

// devCert and devKey are make run's client certificate, presented when
// the CLI falls back on devCA and is given no certificate of its own.
const (
	devCert = "data/certs/client-admin.crt"
	devKey  = "data/certs/client-admin.key"
)

// tlsOptions are the client options for --ca/--cert/--key: TLS when a CA
// is known (given, or make run's), plaintext with --insecure or when none
// is.
func (g *globals) tlsOptions() ([]client.Option, error) {
	if g.insecure {
		if g.ca != "" || g.cert != "" || g.key != "" {
			return nil, usagef("--insecure and --ca/--cert/--key (or RAFTQ_INSECURE and RAFTQ_CA...) contradict each other: choose one")
		}
		return nil, nil
	}
	ca, cert, key := g.ca, g.cert, g.key
	if ca == "" {
		if _, err := os.Stat(devCA); err == nil {
			ca = devCA
			if cert == "" && key == "" {
				if _, err := os.Stat(devCert); err == nil {
					cert, key = devCert, devKey
				}
			}
		}
	}
	if ca == "" {
		if g.cert != "" || g.key != "" {
			return nil, usagef("--cert and --key need --ca (the CA that signed the nodes' certificates)")
		}
		return nil, nil
	}
	cfg, err := tlsconf.ClientFiles(ca, cert, key)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, usagef("%v", err)
		}
		return nil, err
	}
	g.ca = ca
	return []client.Option{client.WithTLS(credentials.NewTLS(cfg))}, nil
}

// tokenOptions are the client options for --token/--token-file.
func (g *globals) tokenOptions() ([]client.Option, error) {
	switch {
	case g.token != "" && g.tokenFile != "":
		return nil, usagef("--token and --token-file (or RAFTQ_TOKEN and RAFTQ_TOKEN_FILE) contradict each other: choose one")
	case g.tokenFile != "":
		t, err := client.ReadTokenFile(g.tokenFile)
		if err != nil {
			return nil, usagef("--token-file: %v", err)
		}
		return []client.Option{client.WithToken(t)}, nil
	case g.token != "":
		return []client.Option{client.WithToken(g.token)}, nil
	}
	return nil, nil
}
