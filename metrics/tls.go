package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WatchCertificate exports when the node's certificate expires; notAfter
// is read at every scrape, so a reload on SIGHUP shows at once. An alert
// on raftq_tls_cert_expiry_timestamp_seconds - time() < 14 days leaves
// time to rotate (docs/security.md, "Rotation").
func (m *Metrics) WatchCertificate(notAfter func() time.Time) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "raftq_tls_cert_expiry_timestamp_seconds",
		Help: "When this node's TLS certificate expires, in Unix seconds (absent with --insecure).",
	}, func() float64 { return float64(notAfter().Unix()) }))
}
