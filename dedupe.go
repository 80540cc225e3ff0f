package queue

import (
	"hash/maphash"
	"sync"
)

// keySet is the in-memory store's pending-key set: one entry per key whose
// job is queued, scheduled or running, plus at most one coalesced rerun of
// a running key. It is sharded so that unrelated keys never share a lock.
//
// Lock order: a shard's mutex may be held while taking the schedule's; the
// schedule never takes a shard's.
type keySet[T any] struct {
	seed   maphash.Seed
	shards [keyShards]keyShard[T]
}

const keyShards = 64

type keyShard[T any] struct {
	mu sync.Mutex
	m  map[string]keyEntry[T]
	_  [40]byte // keep neighbouring shards' locks off one cache line
}

type keyState uint8

const (
	keyPending keyState = iota + 1 // queued or scheduled
	keyRunning
)

type keyEntry[T any] struct { // fields ordered to pack: 40 bytes, not 48
	id    int64    // the job holding the key
	group string   // the job's group, freed when it is cancelled
	rerun *item[T] // the coalesced rerun of a running key
	state keyState // pending or running
	sched bool     // a pending job waits in the schedule, not a ready queue
	prio  uint8    // the pending job's priority, for the ready queues' tombstone counts
}

func newKeySet[T any]() *keySet[T] {
	ks := &keySet[T]{seed: maphash.MakeSeed()}
	for i := range ks.shards {
		ks.shards[i].m = make(map[string]keyEntry[T])
	}
	return ks
}

func (ks *keySet[T]) shard(key string) *keyShard[T] {
	return &ks.shards[maphash.String(ks.seed, key)%keyShards]
}

// counts returns the number of keys held and of coalesced reruns waiting.
func (ks *keySet[T]) counts() (keys, reruns int) {
	for i := range ks.shards {
		s := &ks.shards[i]
		s.mu.Lock()
		keys += len(s.m)
		for _, e := range s.m {
			if e.rerun != nil {
				reruns++
			}
		}
		s.mu.Unlock()
	}
	return keys, reruns
}

// forEach calls fn for every key under its shard's lock; fn may modify or
// delete the entry through the returned action.
func (ks *keySet[T]) forEach(fn func(key string, e *keyEntry[T]) (del bool)) {
	for i := range ks.shards {
		s := &ks.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if fn(k, &e) {
				delete(s.m, k)
			} else {
				s.m[k] = e
			}
		}
		s.mu.Unlock()
	}
}
