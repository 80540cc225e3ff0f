package durable

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue/queuetype"
)

// TestJSONCodec: the default codec of the durable stores round-trips a
// payload through encoding/json and reports what it cannot encode.
func TestJSONCodec(t *testing.T) {
	type payload struct {
		Hash string `json:"hash"`
		Port int    `json:"port"`
	}
	c := JSONCodec{}
	data, err := c.Marshal(payload{Hash: "ab", Port: 6881})
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != `{"hash":"ab","port":6881}` {
		t.Fatalf("Marshal = %s", data)
	}
	var got payload
	if err := c.Unmarshal(data, &got); err != nil || got != (payload{Hash: "ab", Port: 6881}) {
		t.Fatalf("Unmarshal = %+v, %v", got, err)
	}
	if _, err := c.Marshal(make(chan int)); err == nil {
		t.Fatal("Marshal of a channel succeeded")
	}
	if err := c.Unmarshal([]byte("not json"), &got); err == nil {
		t.Fatal("Unmarshal of bad input succeeded")
	}
}

// TestEncodePayloadTooLarge: the error both durable stores return for a
// payload over the limit matches queue.ErrPayloadTooLarge, wrapped or not,
// names the size and the limit in the same words on every store, and
// matches no other error.
func TestEncodePayloadTooLarge(t *testing.T) {
	o := Defaults("pgstore", time.Second)
	o.MaxPayload = 1024
	_, err := o.Encode(strings.Repeat("x", 2046)) // 2048 bytes of JSON
	err = fmt.Errorf("wrapped: %w", err)
	if !errors.Is(err, queuetype.ErrPayloadTooLarge) {
		t.Fatalf("Encode = %v: does not match ErrPayloadTooLarge", err)
	}
	if got, want := errors.Unwrap(err).Error(), "queue: payload too large: 2048 bytes, limit 1024"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if errors.Is(queuetype.ErrQueueFull, queuetype.ErrPayloadTooLarge) || errors.Is(err, queuetype.ErrQueueFull) {
		t.Fatal("ErrPayloadTooLarge matches another error")
	}
	if b, err := o.Encode(strings.Repeat("x", 1022)); err != nil || len(b) != 1024 {
		t.Fatalf("Encode at the limit = %d bytes, %v", len(b), err)
	}
}
