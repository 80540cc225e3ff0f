//go:build unix

package sqlitestore

import (
	"os"
	"syscall"
)

// fileLock is an advisory lock (flock) on a file beside the database,
// which every process's writer holds for its whole write transaction:
// processes waiting to write wait in the kernel and are woken when it is
// released, rather than polling SQLite's lock in its busy handler, which
// sleeps up to 100 ms between tries and lets a busy process starve
// another. SQLite's own locking still guards the file; writers that do
// not take this lock (a program's own transactions) meet the busy
// timeout as usual.
type fileLock struct{ f *os.File }

func openLock(path string) (*fileLock, error) {
	f, err := os.OpenFile(path+"-queuelock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	return &fileLock{f: f}, nil
}

func (l *fileLock) lock() {
	for {
		err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			return
		}
	}
}

func (l *fileLock) unlock() { _ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN) }

func (l *fileLock) close() error { return l.f.Close() }
