package storekit

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
