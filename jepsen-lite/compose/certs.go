package compose

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/tlsconf"
)

// credentials copies the project's development certificates out of its
// certs service (docker/compose.yaml; docker cp works on its exited
// container) and returns what the harness dials with: the CA for the
// client ports (with the client certificate), and n1's certificate for the peer ports, which take
// members only (replica digests).
func (p *Project) credentials(ctx context.Context) (client, member credentials.TransportCredentials, err error) {
	out, err := p.compose(ctx, "ps", "-a", "-q", "certs")
	if err != nil {
		return nil, nil, err
	}
	id := strings.TrimSpace(string(out))
	if id == "" {
		return nil, nil, fmt.Errorf("no certs container in project %s", p.Name)
	}
	dir, err := os.MkdirTemp("", "jepsen-compose-certs")
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	defer os.RemoveAll(dir)
	if _, err := run(ctx, nil, "docker", "cp", strings.Fields(id)[0]+":/certs", dir); err != nil {
		return nil, nil, err
	}
	d := filepath.Join(dir, "certs")
	// The nodes run --client-auth require: the harness's clients present
	// the development client certificate.
	cfg, err := tlsconf.ClientFiles(filepath.Join(d, "ca.crt"), filepath.Join(d, "client-admin.crt"), filepath.Join(d, "client-admin.key"))
	if err != nil {
		return nil, nil, err
	}
	st, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(d, "ca.crt"), Cert: filepath.Join(d, "n1.crt"), Key: filepath.Join(d, "n1.key")})
	if err != nil {
		return nil, nil, err
	}
	return credentials.NewTLS(cfg), st.PeerCredentials(), nil
}
