package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/console"
	"github.com/raftq/raftq/tlsconf"
)

// serveHTTP serves the HTTP port: mux (/metrics, /healthz) and the web
// console (docs/console.md) under console.Prefix. With TLS the port takes
// both: a connection that opens with a TLS handshake gets everything over
// TLS (the console's login carries an API key, which must not cross
// plaintext), a plaintext one gets mux alone, so scrapers and health checks
// keep working unchanged, and a redirect to https for a console page. The
// console runs until ctx ends. stop shuts the servers down.
func serveHTTP(ctx context.Context, cfg *config, sec *security, mux *http.ServeMux, metrics http.Handler, log *slog.Logger) (stop func(context.Context) error) {
	full := http.NewServeMux()
	full.Handle("/", mux)
	stopConsole := func() {}
	var con *console.Console
	var err error
	if cfg.Console {
		con, err = console.New(console.Options{
			Dial:         consoleDialer(cfg, sec),
			RequireLogin: cfg.ClientAuth == clientAuthRequire,
			Secure:       sec.tls != nil,
			NodeID:       cfg.NodeID,
			Hosts:        splitList(cfg.ConsoleHosts),
			Metrics:      metrics,
			Logger:       log,
		})
	}
	if err != nil {
		// The console is built from files embedded at compile time: a
		// failure is a bug, and /metrics must not go down with it.
		log.Error("console disabled", "err", err)
		con = nil
	} else if con != nil {
		full.Handle(console.Prefix, con)
		full.Handle("/console", http.RedirectHandler(console.Prefix, http.StatusSeeOther))
	}
	ln, err := net.Listen("tcp", cfg.HTTPBind)
	if err != nil {
		log.Error("metrics server stopped", "err", err)
		return func(context.Context) error { return nil }
	}
	if con != nil {
		// The console stops after the HTTP servers have drained (stop
		// below), not when the node's context ends: requests in flight
		// keep their sessions' clients until they are answered.
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); con.Run(cctx) }()
		stopConsole = func() { cancel(); <-done }
	}
	serve := func(s *http.Server, l net.Listener) {
		// Shutting one side of a split port down closes the other's
		// listener under it: net.ErrClosed is a stop, not a failure.
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}
	if sec.tls == nil {
		hs := &http.Server{Handler: full, ReadHeaderTimeout: 5 * time.Second}
		go serve(hs, ln)
		return func(c context.Context) error {
			err := hs.Shutdown(c)
			stopConsole()
			return err
		}
	}
	tlsLn, plainLn := splitTLS(ln)
	secure := &http.Server{Handler: full, ReadHeaderTimeout: 5 * time.Second, TLSConfig: consoleTLS(sec.tls)}
	plain := &http.Server{Handler: toHTTPS(mux), ReadHeaderTimeout: 5 * time.Second}
	go serve(secure, tls.NewListener(tlsLn, secure.TLSConfig))
	go serve(plain, plainLn)
	return func(c context.Context) error {
		err := errors.Join(secure.Shutdown(c), plain.Shutdown(c))
		stopConsole()
		return err
	}
}

// toHTTPS is the plaintext side of a TLS node's HTTP port: the console
// redirects to https, everything else is mux's.
func toHTTPS(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, console.Prefix) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				// A form posted over plaintext may already have carried a
				// key; refuse it rather than redirect it.
				http.Error(w, "console: this node serves its console over TLS only: use https://"+r.Host+r.URL.Path, http.StatusBadRequest)
				return
			}
			http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusMovedPermanently)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// consoleTLS serves the console with the node's own certificate (reloaded
// on SIGHUP with it). Browsers are not asked for a client certificate:
// console users log in with an API key.
func consoleTLS(st *tlsconf.Store) *tls.Config {
	base := st.ClientPort()
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := base.GetConfigForClient(hi)
			if err != nil {
				return nil, err
			}
			c = c.Clone()
			c.ClientAuth, c.ClientCAs, c.NextProtos = tls.NoClientCert, nil, []string{"http/1.1"}
			return c, nil
		},
	}
}

// consoleDialer dials this node's own client port as a console user: with
// the user's API key and, under TLS, no client certificate (the node's
// own would make every user a cluster member), so the API authenticates,
// authorizes and audits each call as that user's.
func consoleDialer(cfg *config, sec *security) func(ctx context.Context, token string) (*client.Client, error) {
	return func(ctx context.Context, token string) (*client.Client, error) {
		var opts []client.Option
		if sec.tls != nil {
			opts = append(opts, client.WithTLS(credentials.NewTLS(selfCheck(sec.tls))))
		}
		if token != "" {
			opts = append(opts, client.WithToken(token))
		}
		c, err := client.Dial(ctx, []string{cfg.GRPCAdvertise}, opts...)
		if err != nil {
			return nil, fmt.Errorf("console: dial %s: %w", cfg.GRPCAdvertise, err)
		}
		return c, nil
	}
}

// selfCheck trusts a node certificate of this cluster's CA, whatever the
// address (the advertised one need not be in the certificate's names),
// as tlsconf's Dialer does for node-to-node calls, and presents none.
func selfCheck(st *tlsconf.Store) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         tlsconf.ALPNGRPC,
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("console: the node presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: st.Pool(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("console: the node's certificate is not from this cluster's CA: %w", err)
			}
			id, err := tlsconf.IdentityOf(leaf)
			if err != nil {
				return fmt.Errorf("console: %w", err)
			}
			if id.Role != tlsconf.RoleNode {
				return fmt.Errorf("console: certificate of %s where a node was expected", id)
			}
			return nil
		},
	}
}
