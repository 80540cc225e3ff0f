package durable

import (
	"encoding/json"

	"github.com/queuekit/queue"
)

// JSONCodec is the durable stores' default queue.Codec: encoding/json. It
// is not exported by the stores or the queue because a host never needs to
// name it: leaving WithCodec out selects it.
type JSONCodec struct{}

var _ queue.Codec = JSONCodec{}

// Marshal calls json.Marshal.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal calls json.Unmarshal.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
