package queuetest

import "sync"

// idSet is a concurrency-safe set of job IDs.
type idSet struct {
	mu  sync.Mutex
	ids map[int64]struct{}
}

func newIDSet() *idSet { return &idSet{ids: map[int64]struct{}{}} }

// add adds id and reports whether it was new.
func (s *idSet) add(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return false
	}
	s.ids[id] = struct{}{}
	return true
}
