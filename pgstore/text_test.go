package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/stretchr/testify/require"
)

// TestRefusedErrorTextFallsBack: an outcome whose error text the database
// refuses (here a NUL byte, written without the escaping Dead does) is
// written with a plain text in its place, rather than failing and
// leaving the job leased, to be rescued and run again.
func TestRefusedErrorTextFallsBack(t *testing.T) {
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "refused", queuetest.NewFakeClock(epoch))
	ctx := context.Background()
	_, err := s.Add(ctx, queue.Job[P]{Key: "k"})
	require.NoError(t, err)
	j := claimWithin(t, s, 5*time.Second)
	require.NoError(t, pgstore.DeadRawText(s, ctx, j, "upstream said: a\x00b"))
	var state, last string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT state, last_error FROM `+e.schema+`.queuekit_jobs WHERE id = $1`, j.ID).
		Scan(&state, &last))
	require.Equal(t, "dead", state)
	require.Equal(t, "upstream said: a?b (pgstore: the full error text was refused by the database: SQLSTATE 22021)", last)
}
