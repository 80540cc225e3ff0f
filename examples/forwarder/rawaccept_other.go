//go:build !(linux && (amd64 || arm64))

package main

import "net"

// rawListener is Linux's only (rawaccept_linux.go): elsewhere every
// connection is accepted through the net package.
type rawListener struct{}

func newRawListener(net.Listener) (*rawListener, bool) { return nil, false }

func (*rawListener) Close() error { return nil }

func (s *announceServer) serveRaw(*rawListener) error { return nil }

func rawRead(fd int, p []byte) (int, error) { return 0, errNotYet }
