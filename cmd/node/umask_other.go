//go:build !unix

package main

// privateFiles has nothing to set where there is no umask.
func privateFiles() {}
