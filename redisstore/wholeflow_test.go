package redisstore

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/storetest/fleettest"
)

// TestFleetWholeFlow runs the whole flow of a fleet of managers
// (fleettest.RunFlow): two managers with leader election on one store, a
// standby killed mid-job (the janitor runs its jobs again), the leader
// killed mid-job (the standby takes over), replacements started, jobs at
// once and scheduled across the failover; every job runs, each once but
// the jobs in flight at a kill. The queue's priorities are sharded across
// two Redis servers of the test's own: "high" and "normal" on one, "low"
// on the other (WithShard). The leader key is on the first; the records
// too.
func TestFleetWholeFlow(t *testing.T) {
	high, low := startOwnRedis(t), startOwnRedis(t)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: high.addr()})
	t.Cleanup(func() { rc.Close() })
	lc := redis.NewClient(&redis.Options{Addr: low.addr()})
	t.Cleanup(func() { lc.Close() })
	servers := []*redis.Client{rc, lc}
	ks := newKeyspace(flowPrefix, "q", nil)
	fleettest.RunFlow(t, fleettest.Driver{
		Start: func(t *testing.T) *fleettest.Proc {
			return fleettest.StartProc(t, "^TestFleetWholeFlowHelper$", flowEnv+"="+high.addr()+" "+low.addr())
		},
		Read: func(t *testing.T) map[string][]string {
			lists := map[string][]string{}
			for _, l := range fleettest.Lists {
				var err error
				lists[l], err = rc.LRange(ctx, flowList(l), 0, -1).Result()
				require.NoError(t, err)
			}
			return lists
		},
		Leases: func(t *testing.T, owner string) map[fleettest.Ref]time.Time {
			held := map[fleettest.Ref]time.Time{}
			for _, c := range servers {
				// The lease tokens and expiries as of one moment (MULTI):
				// a lease rescued and claimed again in between would pair
				// the old token with the new expiry.
				var leases *redis.MapStringStringCmd
				var run *redis.ZSliceCmd
				_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					leases = p.HGetAll(ctx, ks.fixed[kLease])
					run = p.ZRangeWithScores(ctx, ks.fixed[kRun], 0, -1)
					return nil
				})
				require.NoError(t, err)
				expiry := map[string]float64{}
				for _, z := range run.Val() {
					expiry[z.Member.(string)] = z.Score
				}
				for id, tok := range leases.Val() {
					a, ok := strings.CutPrefix(tok, owner+":") // the claim script's lease token
					if !ok {
						continue
					}
					var ref fleettest.Ref
					ref.ID, err = strconv.ParseInt(id, 10, 64)
					require.NoError(t, err, id)
					ref.Attempt, err = strconv.Atoi(a)
					require.NoError(t, err, tok)
					if exp, ok := expiry[id]; ok {
						held[ref] = time.UnixMilli(int64(exp))
					}
				}
			}
			return held
		},
		Leader: func(t *testing.T) string {
			v, _ := rc.Get(ctx, ks.leader).Result()
			return v
		},
		// Each priority's jobs run on its own server: its lease set holds
		// that priority's held jobs.
		WhileHeld: func(t *testing.T, f *fleettest.Flow) {
			nHigh := 0
			for p := range fleettest.Holds {
				if f.Jobs[p].Prio == fleettest.High {
					nHigh++
				}
			}
			require.EqualValues(t, nHigh, rc.ZCard(ctx, ks.fixed[kRun]).Val(), "jobs running on the high server")
			require.EqualValues(t, fleettest.Holds-nHigh, lc.ZCard(ctx, ks.fixed[kRun]).Val(), "jobs running on the low server")
		},
		// Each job's ID carries its shard's code (the index of the
		// shard's first priority); both servers are empty.
		Ended: func(t *testing.T, f *fleettest.Flow, r fleettest.Records) {
			code := map[string]int64{fleettest.High: 0, fleettest.Low: 2}
			for p, j := range f.Jobs {
				if runs := r.Runs[p]; len(runs) > 0 && runs[0].ID&31 != code[j.Prio] {
					t.Errorf("job %d (%s) has ID %d, of shard code %d; want %d", p, j.Prio, runs[0].ID, runs[0].ID&31, code[j.Prio])
				}
			}
			for _, c := range servers {
				for _, key := range []string{ks.fixed[kRun], ks.fixed[kSched], ks.fixed[kDead]} {
					require.Zero(t, c.ZCard(ctx, key).Val(), "%s on %s at the end", key, c.Options().Addr)
				}
				n, err := c.HGet(ctx, ks.fixed[kCount], "r:"+fleettest.High).Int()
				if c == lc {
					n, err = c.HGet(ctx, ks.fixed[kCount], "r:"+fleettest.Low).Int()
				}
				require.NoError(t, err, "the ready count on %s", c.Options().Addr)
				require.Zero(t, n, "ready jobs on %s at the end", c.Options().Addr)
			}
		},
	})
}

const (
	flowEnv    = "REDISSTORE_WHOLEFLOW" // the high and the low server's addresses
	flowPrefix = "flow"
)

// flowList is the key of a fleettest record list, on the high server.
func flowList(name string) string { return "{" + flowPrefix + ":q}:test:" + name }

// TestFleetWholeFlowHelper is a manager of TestFleetWholeFlow
// (fleettest.Serve); it does nothing in a normal test run.
func TestFleetWholeFlowHelper(t *testing.T) {
	addrs := strings.Fields(os.Getenv(flowEnv))
	if len(addrs) != 2 {
		t.Skip("helper process of TestFleetWholeFlow")
	}
	high := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer high.Close()
	low := redis.NewClient(&redis.Options{Addr: addrs[1]})
	defer low.Close()
	s, err := New[int](high, WithPrefix(flowPrefix), WithShard(fleettest.Low, low), WithLeaseTTL(fleettest.LeaseTTL),
		WithLeaderTTL(fleettest.LeaderTTL), WithJanitorInterval(fleettest.Janitor))
	require.NoError(t, err)
	fleettest.Serve(t, s, s.WorkerID(), func(list, line string) error {
		return high.RPush(context.Background(), flowList(list), line).Err()
	})
}
