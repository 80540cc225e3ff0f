// Package core holds the data types and errors that package queue and its
// in-memory store (internal/memstore) both use: Job, the Store contract's
// value types (StoreConfig, Added, StoreStats, ScheduledJob, Priority),
// Event, Clock and the errors a store returns. Package queue re-exports
// each under the same name (type aliases and variables holding the same
// values), so for a user they are queue.Job, queue.ErrQueueFull and so on;
// they live here only because queue imports memstore, which needs them, and
// so memstore cannot import queue.
package core
