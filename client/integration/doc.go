// Package integration holds end-to-end tests of the client SDK, the worker
// SDK and the raftq CLI against real raftq-node processes on loopback
// (internal/testcluster). It has no non-test code.
package integration
