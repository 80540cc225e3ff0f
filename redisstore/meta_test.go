package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storetest"
)

// testMetaOf returns a Meta of the given pairs.
func testMetaOf(pairs ...string) queue.Meta {
	var m queue.Meta
	for i := 0; i < len(pairs); i += 2 {
		m.Set(pairs[i], pairs[i+1])
	}
	return m
}

// TestMetaRecord: a job's metadata is the md field of its meta record,
// absent for a job without any (so it costs nothing), and comes back from
// each add path (add-one, add-ready, add) at its claim and in the admin
// API; a record written before Meta existed (no md) reads as no metadata.
func TestMetaRecord(t *testing.T) {
	c := needRedis(t)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	md := testMetaOf("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant", "ümlaut \"q\" \\ </script>")
	record := func(id int64) string {
		return c.HGet(ctx, sh.ks.fixed[kMeta], strconv.FormatInt(id, 10)).Val()
	}

	// add-one: one job at a time.
	with, err := s.Add(ctx, queue.Job[int]{Payload: 1, Meta: md})
	require.NoError(t, err)
	without, err := s.Add(ctx, queue.Job[int]{Payload: 2})
	require.NoError(t, err)
	require.Contains(t, record(with.ID), `"md":`)
	require.NotContains(t, record(without.ID), `"md"`, "a job without metadata has no md field")
	// add-ready: a batch; add: a job with a key, a non-UTF-8 one.
	batch, err := s.EnqueueMany(ctx, []queue.Job[int]{{Payload: 3, Meta: md}, {Payload: 4}})
	require.NoError(t, err)
	keyed, err := s.Add(ctx, queue.Job[int]{Key: "k\xff", Payload: 5, Meta: md})
	require.NoError(t, err)
	require.NotContains(t, record(batch[1].ID), `"md"`)

	// A record as a version before Meta wrote it.
	old := int64(1 << 40)
	oldRec := `{"k":"","g":"","t":"","p":"normal","r":0,"a":0,"m":0,"e":"","c":0,"s":"q"}`
	require.NoError(t, c.HSet(ctx, sh.ks.fixed[kMeta], strconv.FormatInt(old, 10), oldRec).Err())
	require.NoError(t, c.HSet(ctx, sh.ks.fixed[kData], strconv.FormatInt(old, 10), "6").Err())
	require.NoError(t, c.RPush(ctx, sh.ks.fixed[nFixedKeys+sh.labelIndex("normal")], old).Err())
	require.NoError(t, c.HIncrBy(ctx, sh.ks.fixed[kCount], "r:normal", 1).Err())

	a := s.Admin()
	want := map[int64]queue.Meta{with.ID: md, without.ID: {}, batch[0].ID: md, batch[1].ID: {}, keyed.ID: md, old: {}}
	for id, m := range want {
		info, err := a.Get(ctx, id, false)
		require.NoError(t, err)
		require.Equal(t, m, info.Meta, "admin Get of job %d", id)
	}
	for range want {
		j := claimWithin(t, s, 5*time.Second)
		require.Equal(t, want[j.ID], j.Meta, "claim of job %d", j.ID)
		// A retry rewrites the record with cjson: the metadata survives.
		require.NoError(t, s.Retry(ctx, j, time.Now().Add(-time.Second), nil))
	}
	for range want {
		j := claimWithin(t, s, 5*time.Second)
		require.Equal(t, want[j.ID], j.Meta, "claim of job %d after a retry", j.ID)
		require.NoError(t, s.Complete(ctx, j))
	}
}

// TestMetaBadRecord: a record whose md does not decode (edited by hand)
// dead-letters its job at claim, with an error naming the metadata, as an
// undecodable payload does.
func TestMetaBadRecord(t *testing.T) {
	c := needRedis(t)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	a, err := s.Add(ctx, queue.Job[int]{Payload: 1, Meta: testMetaOf("k", "v")})
	require.NoError(t, err)
	f := strconv.FormatInt(a.ID, 10)
	rec := c.HGet(ctx, sh.ks.fixed[kMeta], f).Val()
	require.NoError(t, c.HSet(ctx, sh.ks.fixed[kMeta], f, strings.Replace(rec, `"md":"{`, `"md":"[`, 1)).Err())
	b, err := s.Add(ctx, queue.Job[int]{Payload: 2})
	require.NoError(t, err)
	j := claimWithin(t, s, 5*time.Second)
	require.Equal(t, b.ID, j.ID, "the job with bad metadata is not handed out")
	info, err := s.Admin().Get(ctx, a.ID, false)
	require.NoError(t, err)
	require.Equal(t, admin.Dead, info.State, "job %d: %+v, want dead", a.ID, info)
	require.Contains(t, info.LastError, "metadata")
}

// TestMetaThroughFallback: a job enqueued while Redis is unreachable keeps
// its metadata in the fallback and through the write-back to Redis.
func TestMetaThroughFallback(t *testing.T) {
	needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	c := proxiedClient(t, p)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	md := testMetaOf("tenant", "t1")
	// The store learns of the outage from its first Add; both go to the
	// fallback.
	p.Down()
	for i := range 2 {
		_, err := s.Add(ctx, queue.Job[int]{Payload: i, Meta: md})
		require.NoError(t, err)
	}
	p.Up()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := s.Stats(ctx)
		require.NoError(c, err)
		assert.True(c, st.Healthy && st.Ready == 2 && st.Detail == "redis: ok", "after the outage: %+v", st)
	}, 20*time.Second, pollTick)
	for range 2 {
		j := claimWithin(t, s, 5*time.Second)
		require.Equal(t, md, j.Meta)
		require.NoError(t, s.Complete(ctx, j))
	}
}
