//go:build !unix

package sqlitestore

// fileLock is a no-op where flock is not available: writers of several
// processes then wait in SQLite's busy handler.
type fileLock struct{}

func openLock(string) (*fileLock, error) { return &fileLock{}, nil }
func (*fileLock) lock()                  {}
func (*fileLock) unlock()                {}
func (*fileLock) close() error           { return nil }
