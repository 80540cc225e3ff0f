// Package memstore is the queue's in-memory store: the default Store of
// package queue. Ready jobs wait in lock-free rings, one per priority
// (ring.go); pending keys in a sharded set (keys.go); scheduled jobs in a
// 4-ary heap with the goroutine that promotes due jobs (schedule.go);
// store.go holds the store's state and lifecycle, and add.go, claim.go,
// outcomes.go, cancel.go, promote.go and stats.go its methods by concern;
// wrap.go holds what a store that falls back to this one needs besides
// the contract (redisstore's outage fallback: jobs numbered by the caller,
// claims that do not wait, jobs taken out and put back).
//
// Besides the contract, the engine calls AddJob, ClaimJob and FinishJob
// directly when the store is its own default one: they take the job by
// pointer, and a worker's WorkerClaim keeps the claimed job's key entry,
// so that the hot path copies no Job and looks no key up twice.
//
// The package implements the public store contract (package storekit)
// on the shared types of package queuetype, which queue re-exports as
// aliases; memstore cannot import queue, which imports it. Store authors
// reach wrap.go's methods through package storekit/memstore.
package memstore
