package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

func TestRecentErrorsRing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
			return queue.Permanent(fmt.Errorf("boom %s", j.Key))
		}, queue.WithWorkers(1, 1), queue.WithCapacity(100, 0))
		require.NoError(t, err)
		start := time.Now()
		for i := range 60 {
			require.NoError(t, q.Enqueue(context.Background(),
				queue.Job[string]{Key: fmt.Sprintf("k%02d", i), Target: "up", Payload: obsMarker}))
		}
		queuetest.Start(t, q)
		queuetest.Settle()

		errs := q.Stats().RecentErrors
		require.Len(t, errs, 50, "the ring keeps the last 50")
		for i, e := range errs {
			key := fmt.Sprintf("k%02d", 59-i) // newest first: k59 … k10
			assert.Equal(t, queue.ErrorRecord{Time: e.Time, JobID: int64(60 - i), Key: key, Target: "up",
				Attempt: 1, Error: "permanent: boom " + key}, e)
			assert.True(t, e.Time.Equal(start), "recorded at the bubble's now")
			assert.NotContains(t, e.Error, obsMarker)
		}
	})
}

func TestRecentErrorsBeforeWraparound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		var got []string
		for _, e := range s.q.Stats().RecentErrors {
			got = append(got, fmt.Sprintf("%s/%s/%d: %s", e.Key, e.Target, e.Attempt, e.Error))
		}
		assert.Equal(t, []string{
			"f/slow/1: target overloaded: HTTP 429 Too Many Requests",
			"c//1: permanent: bad request",
			"b//1: retry in 30s: upstream busy",
		}, got)
	})
}

func TestRecentErrorsLongErrorIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
			return queue.Permanent(errors.New(strings.Repeat("é", 2000)))
		}, queue.WithWorkers(1, 1))
		require.NoError(t, err)
		queuetest.Start(t, q)
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[string]{Payload: "x"}))
		queuetest.Settle()
		errs := q.Stats().RecentErrors
		require.Len(t, errs, 1)
		assert.LessOrEqual(t, len(errs[0].Error), 512)
		assert.True(t, strings.HasSuffix(errs[0].Error, "..."))
		assert.True(t, strings.ToValidUTF8(errs[0].Error, "?") == errs[0].Error, "cut on a rune boundary")
	})
}
