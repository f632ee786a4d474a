//go:build unix

package main

import "syscall"

// privateFiles makes every file and directory the process creates owner
// only. raftq's own code asks for 0600 and 0700; the umask covers what
// its libraries create with wider modes (hashicorp/raft's snapshot store,
// for one), since those hold message bodies too.
func privateFiles() { syscall.Umask(0o077) }
