package dashboard

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

// The state lists the periodic jobs with their next and last period and
// outcome; an error text holding markup comes back escaped.
func TestStateListsPeriodicJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const evil = `<script>alert(1)</script>`
		q, err := queue.New(func(context.Context, queue.Job[string]) error { return queue.Permanent(errors.New(evil)) })
		require.NoError(t, err)
		require.NoError(t, q.Start(context.Background()))
		defer q.Stop(context.Background())
		start := time.Now()
		require.NoError(t, q.Periodic("nightly", queue.Every(24*time.Hour), queue.Job[string]{}, queue.PeriodicOptions{}))
		time.Sleep(24 * time.Hour) // the first period: never at start
		synctest.Wait()

		s, body := getState(t, newHandler(t, q))
		assert.NotContains(t, body, "<script>")
		require.Len(t, s.Periodic, 1)
		p := s.Periodic[0]
		assert.Equal(t, "nightly", p.Name)
		assert.True(t, p.Next.Equal(start.Add(48*time.Hour)), "next %v", p.Next)
		assert.True(t, p.Last.Equal(start.Add(24*time.Hour)), "last %v", p.Last)
		assert.Equal(t, "dead", p.LastOutcome)
		assert.Equal(t, "permanent: "+evil, p.LastError)

		require.True(t, q.RemovePeriodic("nightly"))
		s, body = getState(t, newHandler(t, q))
		assert.Empty(t, s.Periodic)
		assert.Contains(t, body, `"periodic":[]`)
	})
}
