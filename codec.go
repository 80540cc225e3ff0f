package queue

import (
	"github.com/queuekit/queue/queuetype"
)

// DecodeError is the cause a durable store records for a job whose
// payload its Codec cannot decode into the queue's payload type: the job is
// dead-lettered (reported as EventDead with this error) and never handed
// to a worker. Like every dead-lettered job it is counted in Stats.Dead,
// kept in Stats.RecentErrors and given to the OnDead hooks, there with
// this error and a zero Payload.
type DecodeError = queuetype.DecodeError

// ErrPayloadTooLarge is matched (with errors.Is) by the error a durable
// store returns when a job's encoded payload is larger than its limit (the
// stores' WithMaxPayload option). Nothing was stored. The error's text is
// the same on every store: "queue: payload too large: <size> bytes, limit
// <limit>".
var ErrPayloadTooLarge = queuetype.ErrPayloadTooLarge
