package main

import "syscall"

// deferAccept has the kernel hand a connection to accept only once its
// client has sent data (TCP_DEFER_ACCEPT, for up to a second; after that
// it is accepted anyway). Every client of a tracker speaks first, so the
// first read of an accepted connection finds its request rather than
// parking the goroutine until the request arrives.
func deferAccept(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
