package storekit

import "time"

// SlotRequest asks a SlotStore for a slot of a target (storekit.SlotStore's
// AcquireSlot).
type SlotRequest struct {
	Target  string // the target, as in Job.Target
	Holder  string // the slot's holder, unique to this lease
	Process string // the asking process: who waits in the target's line
	Limit   int    // the most slots of the target leased at once
	// TTL is the lease of a slot granted.
	TTL time.Duration
	// Waited is how long Process has waited in the target's line (0
	// when it has not): its place in the line is the store's now less
	// Waited, so that a place lost (to an expiry or a failed call)
	// comes back where it was.
	Waited time.Duration
	// Line is how long a refused Process keeps its place in the line
	// unless it asks again: a process that dies leaves it then.
	Line time.Duration
}

// SlotAnswer is a SlotStore's answer to a SlotRequest.
type SlotAnswer struct {
	Granted bool // the holder has a slot of the target
	// Waiting counts the processes other than the asking one that wait
	// in the target's line, once the request is done.
	Waiting int
}
