// Package queuetype holds the types that a program using package queue
// and a store implementing its contract both need: Job, Priority, Event
// and EventKind, ScheduledJob, Clock and Timer, and the errors a store
// returns to the engine (ErrQueueFull, ErrDuplicate and *DuplicateError,
// ErrInvalidJob, ErrPayloadTooLarge, *DecodeError, *OptionError, …).
//
// It is a leaf: it imports nothing of this repository, so that package
// queue, the store contract (package storekit) and every store can
// depend on it without a cycle, as river's rivertype does.
//
// A program does not import it: package queue declares each of these
// names as an alias (queue.Job is queuetype.Job, queue.ErrQueueFull is
// queuetype.ErrQueueFull), and the aliases are what its documentation
// and examples use. A store author may import either.
//
// # Stability
//
// Part of the v1 API of module github.com/queuekit/queue: within major
// version 1 nothing here is removed or changed incompatibly; fields,
// event kinds and errors may be added.
package queuetype
