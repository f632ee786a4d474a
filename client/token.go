package client

import (
	"context"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
)

// WithToken authenticates every call with an API key (docs/security.md,
// "API keys and roles"), as the token raftq keys create printed. The
// token is a secret: use it only with WithTLS, since over plaintext it
// crosses the network readable.
func WithToken(token string) Option {
	return option(func(c *config) error {
		token = strings.TrimSpace(token)
		if token == "" {
			return fmt.Errorf("WithToken: empty token")
		}
		c.dialOpts = append(c.dialOpts, grpc.WithPerRPCCredentials(bearer(token)))
		return nil
	})
}

// WithTokenFile is WithToken with the token read from a file (its first
// line), such as a credentials file a secret manager mounts.
func WithTokenFile(path string) Option {
	return option(func(c *config) error {
		t, err := ReadTokenFile(path)
		if err != nil {
			return err
		}
		return WithToken(t).apply(c)
	})
}

// ReadTokenFile reads the API key a credentials file holds: its first
// non-empty line.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); t != "" {
			return t, nil
		}
	}
	return "", fmt.Errorf("token file %s is empty", path)
}

// bearer sends the token as "authorization: Bearer <token>" metadata.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that a token also works against a
// --insecure test cluster; WithToken's contract tells users to pair it
// with TLS.
func (bearer) RequireTransportSecurity() bool { return false }
