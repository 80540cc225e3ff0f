package pgstore_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
)

// A payload type the codec cannot encode is refused by New, not by every
// Enqueue. New does no I/O: a pool that was never connected will do.
func TestNewRefusesUnencodablePayloadType(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgstore.New[func()](pool)
	require.Error(t, err)
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "pgstore.New", oe.Option)
	assert.Contains(t, err.Error(), "payload type func()")
	_, err = pgstore.New[struct{ C chan int }](pool)
	assert.ErrorContains(t, err, "chan int")
	_, err = pgstore.New[*struct{ C chan int }](pool) // nil encodes: fine
	assert.NoError(t, err)
	_, err = pgstore.New[any](pool)
	assert.NoError(t, err)
}
