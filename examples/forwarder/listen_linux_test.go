package main

import (
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The listeners defer accepting a connection until its client has sent
// data, and a connection that has sent its request is accepted with it
// already readable.
func TestListenAllDefersAccept(t *testing.T) {
	lns, err := listenAll([]string{"127.0.0.1:0"})
	require.NoError(t, err)
	defer closeAll(lns)
	raw, err := lns[0].(*net.TCPListener).SyscallConn()
	require.NoError(t, err)
	secs, serr := 0, error(nil)
	require.NoError(t, raw.Control(func(fd uintptr) {
		secs, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT)
	}))
	require.NoError(t, serr)
	assert.Positive(t, secs, "TCP_DEFER_ACCEPT on the listener")

	sc := acceptOne(t, lns[0])
	b := make([]byte, 1)
	n, err := sc.Read(b)
	require.NoError(t, err)
	assert.Equal(t, "G", string(b[:n]))
}
