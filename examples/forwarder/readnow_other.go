//go:build !unix

package main

import "syscall"

// readNow reads nothing where a read that does not wait is not written
// for: every connection is served by its own goroutine there.
func readNow(c syscall.RawConn, p []byte) (int, error) { return 0, errNotYet }
