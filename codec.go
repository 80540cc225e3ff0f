package queue

import (
	"errors"
	"fmt"
)

// Codec encodes job payloads for a store that keeps them outside the
// process (pgstore and redisstore take one with their WithCodec option,
// and use encoding/json without it; the in-memory store keeps payloads as
// they are and needs none). Every
// process sharing a queue must use the same Codec, and a Codec must be
// safe for concurrent use.
type Codec interface {
	// Marshal encodes v, a job's Payload.
	Marshal(v any) ([]byte, error)
	// Unmarshal decodes data into v, a pointer to a Payload.
	Unmarshal(data []byte, v any) error
}

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

// Error returns "queue: job N: decoding payload: " and the Codec's error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("queue: job %d: decoding payload: %v", e.JobID, e.Err)
}

// Unwrap returns the Codec's error.
func (e *DecodeError) Unwrap() error { return e.Err }

// ErrPayloadTooLarge is matched (with errors.Is) by the error a durable
// store returns when a job's encoded payload is larger than its limit (the
// stores' WithMaxPayload option). Nothing was stored. The error's text is
// the same on every store: "queue: payload too large: <size> bytes, limit
// <limit>".
var ErrPayloadTooLarge = errors.New("queue: payload too large")
