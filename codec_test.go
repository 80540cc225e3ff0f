package queue_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/queuekit/queue"
)

// TestDecodeError: the cause both durable stores record for a payload
// their codec cannot decode names the job and wraps the codec's error.
func TestDecodeError(t *testing.T) {
	cause := errors.New("bad input")
	var err error = &queue.DecodeError{JobID: 42, Err: cause}
	if got, want := err.Error(), "queue: job 42: decoding payload: bad input"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", err), cause) {
		t.Fatal("a DecodeError does not unwrap to the codec's error")
	}
}

// TestPayloadTooLargeError: the error both durable stores return for a
// payload above their limit carries the figures, matches
// ErrPayloadTooLarge, and says the same words whichever store returns it.
func TestPayloadTooLargeError(t *testing.T) {
	var err error = fmt.Errorf("wrapped: %w", &queue.PayloadTooLargeError{Size: 2048, Limit: 1024})
	if !errors.Is(err, queue.ErrPayloadTooLarge) {
		t.Fatal("a PayloadTooLargeError does not match ErrPayloadTooLarge")
	}
	var tooBig *queue.PayloadTooLargeError
	if !errors.As(err, &tooBig) || tooBig.Size != 2048 || tooBig.Limit != 1024 {
		t.Fatalf("errors.As = %+v", tooBig)
	}
	if got, want := tooBig.Error(), "queue: payload too large: 2048 bytes, limit 1024"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if errors.Is(queue.ErrQueueFull, queue.ErrPayloadTooLarge) || errors.Is(err, queue.ErrQueueFull) {
		t.Fatal("ErrPayloadTooLarge matches another error")
	}
}
