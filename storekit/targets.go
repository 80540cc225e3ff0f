package storekit

import (
	"time"
	"unicode/utf8"
)

// TargetState is one entry a TargetStore keeps: a target's health (Key
// is "") or its next-due time for one fan-out key (Key is not "").
type TargetState struct {
	// Target is the target's name, as in Job.Target.
	Target string `json:"target"`
	// Key is "" for the target's health, or the fan-out key whose
	// next-due time NextDue holds (SetNextDue).
	Key string `json:"key,omitempty"`
	// NextDue is when Target is next due for Key; zero deletes the entry.
	NextDue time.Time `json:"next_due,omitzero"`
	// SuspendedUntil is the end of the target's suspension; zero or past:
	// not suspended.
	SuspendedUntil time.Time `json:"suspended_until,omitzero"`
	// Disabled says the target is disabled until resumed.
	Disabled bool `json:"disabled,omitempty"`
	// Reason says why it was disabled (at most 256 bytes).
	Reason string `json:"reason,omitempty"`
	// DisabledAt is when it was disabled.
	DisabledAt time.Time `json:"disabled_at,omitzero"`
	// BreakerUntil is the end of the circuit breaker's open state: the
	// breaker is open before it, half-open after it (until a probe's
	// outcome closes or re-opens it), and closed when it is zero.
	BreakerUntil time.Time `json:"breaker_until,omitzero"`
}

// DefaultSuspend is how long a target is suspended unless WithSuspend
// says otherwise: the queue's default, and what an admin Suspend of 0
// on a durable store's own admin backend (queuectl) uses, since that
// backend does not know the running queues' WithSuspend.
const DefaultSuspend = 300 * time.Second

// MaxReasonLen bounds a disabled target's stored reason, in bytes.
const MaxReasonLen = 256

// Empty reports whether st keeps nothing: a healthy target, or a cleared
// next-due time. A store may delete an empty entry instead of storing it.
func (st *TargetState) Empty() bool {
	if st.Key != "" {
		return st.NextDue.IsZero()
	}
	return st.SuspendedUntil.IsZero() && !st.Disabled && st.BreakerUntil.IsZero()
}

// ShortReason returns msg if it fits MaxReasonLen bytes, or else its
// start cut at a character boundary and ended with "...", at most
// MaxReasonLen bytes in all: a cut never splits a UTF-8 sequence, which
// PostgreSQL would refuse to store. Invalid UTF-8 and NUL bytes (an
// error text may hold any bytes; PostgreSQL stores neither) are escaped
// first, as in every error text a store keeps (SafeText).
func ShortReason(msg string) string {
	msg = SafeText(msg)
	if len(msg) <= MaxReasonLen {
		return msg
	}
	cut := MaxReasonLen - len("...")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}
