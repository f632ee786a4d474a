package testcluster

import "testing"

// FreePorts reserves n loopback ports for the test's own servers (a
// Prometheus a test runs beside its cluster, say), the way the cluster's
// nodes get theirs (freePorts), until the test ends.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	return freePorts(t, n)
}
