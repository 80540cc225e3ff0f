package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storekit"
)

// Stop while the admin API has the queue paused returns once the running
// jobs end, as it does unpaused: the pause does not keep the workers from
// stopping. A durable store's ready jobs stay in it, as after any Stop;
// the in-memory store's drain runs them (its ready jobs would otherwise be
// lost with the process). Either way every job is accounted for.
func adminStopPaused(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	var ran atomic.Int32
	q, _ := adminQueue(t, store, func(context.Context, queue.Job[Payload]) error { ran.Add(1); return nil })
	a := q.Admin()
	require.NoError(t, a.Pause(ctx))
	start(t, q)
	for i := range 3 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Payload: Payload{N: i}}))
	}
	// The bound only ends a hang: a Stop that works returns as soon as
	// the (idle) workers exit.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, q.Stop(sctx), "Stop of a paused queue")
	p, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}})
	require.NoError(t, err)
	// A store with leases is durable: other processes share its backlog.
	if _, durable := store.(storekit.Leaser); !durable {
		require.EqualValues(t, 3, ran.Load(), "the in-memory drain runs the ready jobs")
		require.Empty(t, p.Jobs)
	} else {
		require.Zero(t, ran.Load(), "no job runs on a paused durable store")
		require.Len(t, p.Jobs, 3, "the jobs stay ready in the store")
	}
}
