// Package quickstart reads the quick start of README.md as a script: its
// ```sh blocks are commands that keep running (a cluster in the
// foreground), its ```console blocks a terminal transcript of commands
// ("$ " lines) and what each prints. The test in this package runs them
// in order, literally, against a fresh cluster in private namespaces, and
// fails if a command fails or prints something other than what the README
// shows, so the README cannot drift from the product.
//
// Values that differ from run to run are compared by their shape: the
// columns of a table named in Volatile (a message id, a receipt, a leader,
// a term) and node names in free text. A value the README shows in one
// output and uses in a later command (the receipt printed by receive,
// given to ack) is replaced in that command by the value this run printed,
// as a reader copies it.
package quickstart
