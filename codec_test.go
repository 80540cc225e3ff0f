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
