package pgstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storetest"
)

// TestWeightedClaimBranches runs the weighted claim statement by hand: it
// claims strictly from $9 only while no other priority has a due
// available job, its result is the weighted one otherwise, and on either
// branch a claimed job is no longer held for its target.
func TestWeightedClaimBranches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	require.NoError(t, s.Init(storetest.Config("branches", 0, nil, nil))) // not started: nothing claims but the test
	claimSQL := pgstore.WeightedClaimSQL(s)
	table := jobsTable(e)
	weights := []int32{0, 5, 10} // high, normal, low
	strides := []int64{1, 2, 6}
	add := func(prio string) int64 {
		t.Helper()
		a, err := s.Add(bg, queue.Job[P]{Priority: prio})
		require.NoError(t, err)
		return a.ID
	}
	claim := func(n int, pass []int64, last int32) []int64 {
		t.Helper()
		rows, err := e.pool.Query(bg, claimSQL, "branches", time.Now(), n, "me", time.Minute.Microseconds(),
			weights, pass, strides, last)
		require.NoError(t, err)
		var ids []int64
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			ids = append(ids, vals[0].(int64))
		}
		require.NoError(t, rows.Err())
		return ids
	}
	held := func(id int64) bool {
		t.Helper()
		var h bool
		require.NoError(t, e.pool.QueryRow(bg, "SELECT held FROM "+table+" WHERE id = $1", id).Scan(&h))
		return h
	}

	// Only normal is ready, and it is $9: the strict claim of its range,
	// in run_at, id order; a held job is held no longer.
	n1, n2, n3 := add("normal"), add("normal"), add("normal")
	_, err := e.pool.Exec(bg, "UPDATE "+table+" SET held = true WHERE id = ANY ($1)", []int64{n1, n2, n3})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{n1, n2}, claim(2, []int64{0, 0, 0}, 5))
	require.False(t, held(n1))
	require.False(t, held(n2))

	// high is ready too, and its pass is far behind: the weighted claim
	// gives both jobs to high although $9 is normal.
	h1, h2 := add("high"), add("high")
	require.ElementsMatch(t, []int64{h1, h2}, claim(2, []int64{0, 100, 100}, 5))

	// Only normal is ready but $9 is low: the weighted claim takes it,
	// and a held job is held no longer on that branch too.
	require.Equal(t, []int64{n3}, claim(2, []int64{0, 0, 0}, 10))
	require.False(t, held(n3))

	// Nothing ready: nothing claimed on either branch.
	require.Empty(t, claim(2, []int64{0, 0, 0}, 5))
	require.Empty(t, claim(2, []int64{0, 0, 0}, 10))
}
