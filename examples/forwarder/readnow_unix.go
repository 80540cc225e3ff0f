//go:build unix

package main

import (
	"io"
	"os"
	"syscall"
)

// readNow reads c into p in one attempt that does not wait: errNotYet
// when nothing has arrived, io.EOF when the peer has closed.
func readNow(c syscall.RawConn, p []byte) (int, error) {
	var n int
	var err error
	if cerr := c.Read(func(fd uintptr) bool {
		n, err = syscall.Read(int(fd), p)
		return true // done, whatever the outcome: no wait for readiness
	}); cerr != nil {
		return 0, cerr
	}
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return 0, errNotYet
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}
