//go:build linux && (amd64 || arm64)

package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// The accept side of a connection per announce, in system calls of its
// own (Linux).
//
// A client that opens a connection for each announce (most do) cost the
// forwarder, through the net package, a descriptor registered with the
// runtime's network poller and deregistered again, the local address
// looked up, TCP_NODELAY set, and a finalizer; and every one of those
// system calls, and the accept, read, write and close, passed through
// the scheduler (entersyscall), whose first such call after the process
// went idle woke the runtime's monitor thread (sysmon) to poll every
// 20 µs again. Under paced load, where the process goes idle between
// most announces, that thread's wake-ups alone were 14 % of the
// forwarder's CPU (docs/benchmarks.md, "accepting in system calls of its
// own").
//
// A raw listener accepts on a duplicate of the listener's descriptor,
// registered with the poller so that the accept loop waits as any
// goroutine does; but it accepts, reads, writes and closes with
// RawSyscall, none of which waits (every descriptor is non-blocking).
// A connection whose request has arrived whole and asks to be closed is
// answered there and then; any other becomes a net.Conn (net.FileConn)
// and is served as before.
type rawListener struct {
	f  *os.File // the duplicate
	rc syscall.RawConn
}

// acceptBuf receives an accepted connection's remote address; each loop
// that accepts has its own.
type acceptBuf struct {
	sa    syscall.RawSockaddrAny
	salen uint32
}

// newRawListener returns a raw listener for ln, or false when ln is not
// a TCP listener or its descriptor cannot be duplicated.
func newRawListener(ln net.Listener) (*rawListener, bool) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, false
	}
	f, err := tl.File()
	if err != nil {
		return nil, false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, false
	}
	return &rawListener{f: f, rc: rc}, true
}

// Close closes the duplicate descriptor; the accept loop returns.
func (rl *rawListener) Close() error { return rl.f.Close() }

// accept accepts a connection on lfd, non-blocking, and returns its
// descriptor and remote address.
func (b *acceptBuf) accept(lfd uintptr) (int, string, syscall.Errno) {
	b.salen = syscall.SizeofSockaddrAny
	fd, _, errno := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, uintptr(unsafe.Pointer(&b.sa)),
		uintptr(unsafe.Pointer(&b.salen)), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return -1, "", errno
	}
	return int(fd), sockaddrString(&b.sa), 0
}

// sockaddrString is sa as net.Conn.RemoteAddr().String() gives it: an
// IPv4-mapped IPv6 address as IPv4, an IPv6 zone by its number.
func sockaddrString(sa *syscall.RawSockaddrAny) string {
	switch sa.Addr.Family {
	case syscall.AF_INET:
		sa4 := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port).String()
	case syscall.AF_INET6:
		sa6 := (*syscall.RawSockaddrInet6)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa6.Port))[:])
		ip := netip.AddrFrom16(sa6.Addr).Unmap()
		if sa6.Scope_id != 0 && ip.Is6() {
			ip = ip.WithZone(strconv.FormatUint(uint64(sa6.Scope_id), 10))
		}
		return netip.AddrPortFrom(ip, port).String()
	}
	return ""
}

// serveRaw accepts rl's connections until rl is closed (then it returns
// http.ErrServerClosed) or accepting fails. One loop waits for
// connections through the runtime's poller and answers them; when it
// finds rawInlineBatch waiting in a row (the load outruns one CPU), it
// wakes a helper, one of procsCeiling()-1 goroutines that accept and
// answer beside it until none is left waiting, so that every CPU answers
// (while the forwarder runs on one P, procs.go, it wakes none: a helper
// could only take turns with it).
func (s *announceServer) serveRaw(rl *rawListener) error {
	h := &rawHelpers{wake: make(chan struct{}, 1), stop: make(chan struct{})}
	for range procsCeiling() - 1 {
		h.wg.Add(1)
		go s.rawHelper(rl, h)
	}
	defer func() {
		close(h.stop)
		h.wg.Wait()
	}()
	var (
		pause time.Duration
		buf   acceptBuf
	)
	for {
		var aerr syscall.Errno
		stopped := false
		err := rl.rc.Read(func(lfd uintptr) bool {
			var more bool
			aerr, stopped, more = s.acceptRaw(lfd, &buf, h)
			if more {
				pause = 0
				return false // wait for the next
			}
			return true
		})
		switch {
		case stopped:
			return http.ErrServerClosed
		case err != nil:
			if s.isClosing() || errors.Is(err, os.ErrClosed) {
				return http.ErrServerClosed
			}
			return err
		case aerr == syscall.EMFILE || aerr == syscall.ENFILE || aerr == syscall.ENOBUFS || aerr == syscall.ENOMEM:
			// Out of descriptors or memory: as net/http does, retry
			// after a pause.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			time.Sleep(pause)
		case aerr != 0:
			return os.NewSyscallError("accept4", aerr)
		}
	}
}

// rawHelpers are the goroutines that accept beside serveRaw's loop.
type rawHelpers struct {
	wake chan struct{} // one pending wake-up at most
	stop chan struct{} // closed when serveRaw returns
	wg   sync.WaitGroup
}

// rawHelper accepts and answers connections on rl each time it is woken,
// until none is waiting, and returns when serveRaw does. It does not
// wait in the poller: only serveRaw's loop does, so that a connection
// arriving at an idle moment wakes one goroutine, not one per CPU. Being
// long-lived, it answers on a stack grown already, where a goroutine per
// connection started small and grew (copystack was 3–4 % of the
// forwarder's CPU under a backlog).
func (s *announceServer) rawHelper(rl *rawListener, h *rawHelpers) {
	defer h.wg.Done()
	var buf acceptBuf
	for {
		select {
		case <-h.stop:
			return
		case <-h.wake:
		}
		// Control holds a reference to the descriptor, not its read
		// lock (which serveRaw's loop holds while it waits): a Close
		// waits for the call to return. An error other than EAGAIN is
		// serveRaw's to report; its loop meets it too.
		_ = rl.rc.Control(func(lfd uintptr) {
			s.acceptRaw(lfd, &buf, h)
		})
	}
}

// acceptRaw accepts and answers connections on lfd until none is
// waiting (more: the caller waits for the next), accepting fails (aerr)
// or Shutdown has begun (stopped). Every rawInlineBatch connections in a
// row it wakes a helper, if one is asleep and the forwarder runs on more
// than one P, to accept beside it.
func (s *announceServer) acceptRaw(lfd uintptr, buf *acceptBuf, h *rawHelpers) (aerr syscall.Errno, stopped, more bool) {
	for n := 1; ; n++ {
		fd, remote, errno := buf.accept(lfd)
		switch errno {
		case 0:
		case syscall.EAGAIN:
			return 0, false, true
		case syscall.EINTR, syscall.ECONNABORTED,
			// Errors already pending on the new connection, which
			// accept(2) says to retry as EAGAIN.
			syscall.ENETDOWN, syscall.EPROTO, syscall.ENOPROTOOPT, syscall.EHOSTDOWN,
			syscall.ENONET, syscall.EHOSTUNREACH, syscall.EOPNOTSUPP, syscall.ENETUNREACH:
			continue
		default:
			return errno, false, false
		}
		if !s.trackRaw() {
			rawClose(fd)
			return 0, true, false // Shutdown has begun
		}
		if n%rawInlineBatch == 0 && procsNow.Load() > 1 {
			select {
			case h.wake <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
		s.answerRaw(getRawAnnounceConn(fd, remote))
	}
}

// rawInlineBatch is how many connections in a row an accept loop answers
// before it wakes a helper to accept beside it: a few answered in turn
// cost less than a second thread woken (at 50 % of opentracker's
// capacity, handing every connection beyond the first to another
// goroutine cost 12 % more CPU per announce), and delay the last by
// some 100 µs.
const rawInlineBatch = 4

// getRawAnnounceConn returns connection state, from the pool, for the
// accepted descriptor fd.
func getRawAnnounceConn(fd int, remote string) *announceConn {
	ac := announceConns.Get().(*announceConn)
	ac.fd = fd
	ac.br.Reset(ac)
	ac.remote = remote
	return ac
}

// answerRaw answers ac's request with system calls of its own when it
// has arrived whole, is one for the fast path and asks for the
// connection to be closed; otherwise ac's descriptor becomes a net.Conn
// served by serveConn. It ends ac's count in s.wg (trackRaw) either way.
func (s *announceServer) answerRaw(ac *announceConn) {
	_, err := ac.br.Peek(1)
	if err != nil && err != errNotYet {
		rawClose(ac.fd)
		s.doneRaw(ac, true)
		return
	}
	if err == nil {
		if h, ok := ac.closingRequest(); ok {
			s.inline.Add(1)
			if !ac.serve(s.announce, &h, s.slow.ErrorLog) {
				rawClose(ac.fd)
				s.doneRaw(ac, false)
				return
			}
			n, errno := rawWrite(ac.fd, ac.out)
			if n == len(ac.out) || errno != 0 && errno != syscall.EAGAIN {
				// Written, or the client is gone.
				rawClose(ac.fd)
				s.doneRaw(ac, true)
				return
			}
			// The socket took part of the reply: the rest waits for
			// the client to read, on a goroutine.
			c, ok := s.rawToConn(ac)
			if !ok {
				return
			}
			go func() {
				c.Write(ac.out[n:])
				s.endConn(ac, true)
			}()
			return
		}
	}
	if c, ok := s.rawToConn(ac); ok {
		ac.c = c
		go s.serveConn(ac)
	}
}

// rawToConn makes ac's descriptor a net.Conn tracked as the net
// package's connections are, with no keep-alive probes (as listenAll's
// listeners give), and moves ac's count in s.wg to it. It reports false,
// having closed the descriptor and ended the count, when that fails or
// Shutdown has begun.
func (s *announceServer) rawToConn(ac *announceConn) (net.Conn, bool) {
	f := os.NewFile(uintptr(ac.fd), "")
	c, err := net.FileConn(f) // a duplicate
	f.Close()
	ac.fd = -1
	if err != nil {
		s.doneRaw(ac, false)
		return nil, false
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAlive(false)
	}
	ok := s.track(c)
	s.doneRaw(ac, false)
	if !ok {
		c.Close()
		return nil, false
	}
	ac.c = c
	return c, true
}

// rawWrite writes b to fd once, without waiting.
func rawWrite(fd int, b []byte) (int, syscall.Errno) {
	if len(b) == 0 {
		return 0, 0
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// rawRead reads fd into p once, without waiting: errNotYet when nothing
// has arrived, io.EOF when the client has closed.
func rawRead(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EINTR:
		return 0, errNotYet
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return int(n), nil
}

func rawClose(fd int) { syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }

// trackRaw counts an accepted descriptor in s.wg, unless Shutdown has
// begun.
func (s *announceServer) trackRaw() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	return true
}

// doneRaw ends a descriptor's count in s.wg, and returns ac to the pool
// when reusable (see release).
func (s *announceServer) doneRaw(ac *announceConn, reusable bool) {
	s.wg.Done()
	if reusable {
		ac.release()
	}
}
