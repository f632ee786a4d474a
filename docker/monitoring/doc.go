// Package monitoring holds the tests of the Prometheus alert rules
// (docker/prometheus/raftq-alerts.yml, with promtool), the scrape
// configuration and the Grafana dashboard (docker/grafana), and of the
// metric names both use against a running cluster. docs/monitoring.md
// describes what they validate. It has no code of its own.
package monitoring
