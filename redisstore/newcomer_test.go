package redisstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

// A payload type the codec cannot encode is refused by New, not by every
// Enqueue.
func TestNewRefusesUnencodablePayloadType(t *testing.T) {
	c := needRedis(t)
	_, err := New[func()](c)
	require.Error(t, err)
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "redisstore.New", oe.Option)
	assert.Contains(t, err.Error(), "payload type func()")
	_, err = New[complex128](c)
	assert.ErrorContains(t, err, "complex128")
}
