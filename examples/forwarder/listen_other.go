//go:build !linux

package main

import "syscall"

// deferAccept does nothing where TCP_DEFER_ACCEPT is not available.
func deferAccept(network, address string, c syscall.RawConn) error { return nil }
