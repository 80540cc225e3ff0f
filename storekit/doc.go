// Package storekit is the contract between package queue's engine and a
// store, the place jobs live: the Store interface and its optional
// companions (Leaser, ClaimCanceller, TargetStore, SlotStore, Admitter,
// FleetSizer, RunCanceller), the values they pass (Config, Added, Stats,
// TargetState) and the errors a store returns to the engine
// (ErrDrained, ErrSuperseded, ErrLeaseLost). Codec is the payload
// encoding a store that keeps jobs outside the process uses.
//
// Programs that use a queue do not import it: they pass a store to
// queue.NewWithStore (pgstore.New, redisstore.New) and use package
// queue. Authors of a store implement Store[T] and prove it with the
// conformance suite in package storetest; package storekit/durable holds
// what the durable stores share (their common options and checks, leader
// election, the janitor's loop, target health on a store).
//
// # Stability
//
// Part of the v1 API of module github.com/queuekit/queue. Within major
// version 1 the Store interface and its companions keep their methods and
// meanings; new capabilities arrive as new optional interfaces that the
// engine detects with a type assertion, so a store written against
// v1.0.0 keeps compiling and working with every v1 minor release of the
// core. Fields may be added to Config, Stats and TargetState.
package storekit
