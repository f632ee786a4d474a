package wire

// MaxRequestBytes caps one encoded request to a node's client port. Nodes
// refuse a larger one with RESOURCE_EXHAUSTED before reading it into
// memory (so one client cannot make a node buffer 64 MiB per call), and
// the Go client refuses to send one. gRPC's default, and 16 times the
// largest message body: a SendBatch of more must be split.
const MaxRequestBytes = 4 << 20
