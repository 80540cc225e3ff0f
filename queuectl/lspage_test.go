package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/admin"
)

// stopStore is an admin.Store whose ListBounded examines admin.MaxExamined jobs
// per call without a match until call matchAt, which returns one job and
// ends the state.
type stopStore struct {
	admin.Store // nil: only List is called
	matchAt     int
	calls       int
}

func (s *stopStore) ListBounded(_ context.Context, _ admin.Filter, _ bool, _ *admin.Cursor, _ int, _ bool) (admin.Listed, error) {
	s.calls++
	if s.calls == s.matchAt {
		return admin.Listed{Jobs: []admin.JobInfo{{ID: 7, Key: "rare", State: admin.Ready, Created: time.Unix(7, 0)}}, Examined: 3}, nil
	}
	return admin.Listed{Examined: admin.MaxExamined, Stop: &admin.Cursor{At: time.Unix(int64(s.calls), 0), ID: int64(s.calls)}}, nil
}

// TestLsFollowsPartialPages: ls follows partial pages until the page fills
// or the state ends, reporting progress on stderr, and stops after lsPages
// calls with a partial page and the cursor to go on from.
func TestLsFollowsPartialPages(t *testing.T) {
	q := admin.Query{Filter: admin.Filter{State: admin.Ready, Target: "rare"}, Limit: 20}
	var stderr bytes.Buffer
	c := &cli{ctx: context.Background(), stderr: &stderr}

	s := &stopStore{matchAt: 3}
	p, err := c.lsPage(&backend{adm: admin.New(s)}, q)
	require.NoError(t, err)
	require.Equal(t, 3, s.calls)
	require.Len(t, p.Jobs, 1)
	require.False(t, p.Partial)
	require.Empty(t, p.Next)
	require.Equal(t, 2*admin.MaxExamined+3, p.Examined)
	require.Equal(t, 2, strings.Count(stderr.String(), "matching so far"))

	stderr.Reset()
	s = &stopStore{matchAt: -1}
	p, err = c.lsPage(&backend{adm: admin.New(s)}, q)
	require.NoError(t, err)
	require.Equal(t, lsPages, s.calls)
	require.True(t, p.Partial)
	require.NotEmpty(t, p.Next)
	require.Empty(t, p.Jobs)
	var out bytes.Buffer
	require.NoError(t, writeJobTable(&out, p, false))
	require.Contains(t, out.String(), "partial page: 200000 jobs examined, 0 matching")
	require.Contains(t, out.String(), "next page: --after ")
}
