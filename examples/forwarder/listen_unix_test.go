//go:build unix

package main

import (
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The listeners' accepted connections have no TCP keep-alive probes:
// idle connections are closed by the servers' idle timeouts instead.
func TestListenAllNoKeepAlive(t *testing.T) {
	lns, err := listenAll([]string{"127.0.0.1:0"})
	require.NoError(t, err)
	defer closeAll(lns)
	sc := acceptOne(t, lns[0])
	raw, err := sc.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	on, serr := -1, error(nil)
	require.NoError(t, raw.Control(func(fd uintptr) {
		on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
	}))
	require.NoError(t, serr)
	assert.Zero(t, on, "SO_KEEPALIVE on an accepted connection")
}
