package durable

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/queuekit/queue/storekit"
)

// JSONCodec is the durable stores' default storekit.Codec: encoding/json. It
// is not exported by the stores or the queue because a host never needs to
// name it: leaving WithCodec out selects it.
type JSONCodec struct{}

var _ storekit.Codec = JSONCodec{}

// Marshal calls json.Marshal.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal calls json.Unmarshal.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// CheckPayloadType returns an error, naming the store's New, when the
// codec cannot encode the zero value of T (a func, a chan, a complex
// number, or a struct holding one, for encoding/json): every Enqueue would
// fail, so New refuses the type instead.
func CheckPayloadType[T any](o *Options) error {
	var zero T
	if _, err := o.Codec.Marshal(zero); err != nil {
		typ := reflect.TypeFor[T]().String()
		codec := fmt.Sprintf("%T", o.Codec)
		if _, ok := o.Codec.(JSONCodec); ok {
			codec = "encoding/json"
		}
		return o.Err("New", typ, "payload type %s cannot be encoded by the codec (%s): %v; use a type it can encode, or another codec (WithCodec)", typ, codec, err)
	}
	return nil
}
