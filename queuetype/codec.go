package queuetype

import (
	"errors"
	"fmt"
)

// DecodeError is the cause a durable store records for a job whose
// payload its Codec cannot decode into the queue's payload type: the job is
// dead-lettered (reported as EventDead with this error) and never handed
// to a worker. Like every dead-lettered job it is counted in Stats.Dead,
// kept in Stats.RecentErrors and given to the OnDead hooks, there with
// this error and a zero Payload.
type DecodeError struct {
	JobID int64 // the job's ID
	Err   error // the Codec's error
}

// ErrPayloadTooLarge is matched (with errors.Is) by the error a durable
// store returns when a job's encoded payload is larger than its limit (the
// stores' WithMaxPayload option). Nothing was stored. The error's text is
// the same on every store: "queue: payload too large: <size> bytes, limit
// <limit>".
var ErrPayloadTooLarge = errors.New("queue: payload too large")

// Error returns "queue: job N: decoding payload: " and the Codec's error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("queue: job %d: decoding payload: %v", e.JobID, e.Err)
}

// Unwrap returns the Codec's error.
func (e *DecodeError) Unwrap() error { return e.Err }
