// Package durable holds what the durable stores (pgstore and redisstore)
// share, so that it is written once and behaves the same on both: the
// options every durable store has, with their names, defaults and checks
// (options.go); binding a store to its queue (bind.go); and the
// background loops' scheduling — the leader election with its janitor
// and the rescue of expired leases on every process (leader.go,
// loop.go).
//
// The loops use the real clock (time.Now and timers), so that tests run
// them in a testing/synctest bubble.
//
// # Stability
//
// Part of the v1 API of module github.com/queuekit/queue, for store
// authors: pgstore and redisstore are released as modules of their own
// and build on it, so within major version 1 nothing here is removed or
// changed incompatibly (a store module at v1.0.0 builds against every
// v1 core). New options arrive as new fields and Set methods.
package durable
