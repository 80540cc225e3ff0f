package pgstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
)

// TestClaimHintLosesNoJob: a job that becomes available again before the
// claim hint without telling anyone (here a forgotten claim, as after a
// PostgreSQL crash or another process's failed claim) is still claimed:
// the claim from the hint comes up short when the jobs after it are
// gone, and the fetcher claims again from the start of the index at
// once, not at its next poll (an hour away).
func TestClaimHintLosesNoJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e, pgstore.WithPollInterval(time.Hour), pgstore.WithJanitorInterval(time.Hour))
	bind(t, s, "hint", nil)
	const n = 20
	jobs := make([]queue.Job[P], n)
	for i := range jobs {
		jobs[i].Payload = P{N: i}
	}
	_, err := s.EnqueueMany(bg, jobs)
	require.NoError(t, err)

	first := claimWithin(t, s, 5*time.Second)
	require.Equal(t, 0, first.Payload.N)
	seen := map[int]int{}
	for range 5 {
		j := claimWithin(t, s, 5*time.Second)
		seen[j.Payload.N]++
		require.NoError(t, s.Complete(bg, j))
	}
	// The first job's claim is forgotten: it is available again, before
	// every hint the claims since could have left.
	forgetClaim(t, e, first.ID, first.Attempt-1)
	for range n - 6 + 1 {
		j := claimWithin(t, s, 5*time.Second)
		seen[j.Payload.N]++
		require.NoError(t, s.Complete(bg, j))
	}
	for i := range n {
		require.Equal(t, 1, seen[i], "job %d claimed %d times after the first claims", i, seen[i])
	}
}
