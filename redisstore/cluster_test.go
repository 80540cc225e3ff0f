package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// ownCluster is a three-master Redis Cluster of the test's own on
// 127.0.0.1, without persistence, built with redis-cli --cluster create.
type ownCluster struct {
	addrs []string
	cmds  []*exec.Cmd
}

// startOwnCluster starts three cluster-enabled redis-servers on free
// ports, joins them with redis-cli --cluster create (no replicas), waits
// until every node reports cluster_state:ok, and kills them by PID when t
// ends. Without redis-server or redis-cli the test skips, except under
// CI=true, where it fails.
func startOwnCluster(t *testing.T) *ownCluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := bin + " not installed (" + err.Error() + "): the Redis Cluster tests need it (apt-get install redis-server)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	dir := t.TempDir()
	cl := &ownCluster{}
	t.Cleanup(func() {
		for _, cmd := range cl.cmds {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	for _, port := range clusterPorts(t, 3) {
		p := strconv.Itoa(port)
		cmd := exec.Command("redis-server", "--port", p, "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
			"--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no",
			"--dir", dir, "--loglevel", "warning")
		require.NoError(t, cmd.Start())
		cl.cmds = append(cl.cmds, cmd)
		cl.addrs = append(cl.addrs, "127.0.0.1:"+p)
	}
	nodes := make([]*redis.Client, len(cl.addrs))
	for i, a := range cl.addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a, DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
		defer nodes[i].Close()
	}
	// A server just started answers once it listens: polled.
	for i, n := range nodes {
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			return n.Ping(ctx).Err() == nil
		}, 10*time.Second, pollTick, "redis-server on %s to answer", cl.addrs[i])
	}
	args := append([]string{"--cluster", "create"}, cl.addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	// Every node must know every slot's owner before the first command:
	// polled on CLUSTER INFO, since the nodes agree by gossip.
	for i, n := range nodes {
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			info, err := n.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:3")
		}, 20*time.Second, pollTick, "cluster_state:ok on %s", cl.addrs[i])
	}
	return cl
}

// clusterPorts returns n free ports whose cluster bus ports (port+10000)
// are free too.
func clusterPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		require.Less(t, tries, 100, "no free port pairs (port, port+10000) on 127.0.0.1")
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		held = append(held, bus)
		ports = append(ports, port)
	}
	return ports
}

// client returns a ClusterClient of the cluster, closed when t ends.
func (cl *ownCluster) client(t *testing.T) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs})
	t.Cleanup(func() { c.Close() })
	return c
}

// owner returns the address of the master serving key's slot.
func owner(t *testing.T, c *redis.ClusterClient, key string) string {
	t.Helper()
	ctx := context.Background()
	n, err := c.MasterForKey(ctx, key)
	require.NoError(t, err)
	return n.Options().Addr
}

// TestCluster runs the conformance suite and whole queues on a real
// three-master Redis Cluster: every script runs on the node of its queue's
// hash tag, so a key outside the tag would fail with CROSSSLOT; two queues
// whose tags hash to slots of different masters each run their jobs there.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := startOwnCluster(t)
	c := cl.client(t)

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Features{Capacity: true, LeaseTTL: 30 * time.Second},
			func(t *testing.T) storekit.Store[storetest.Payload] {
				s, err := New[storetest.Payload](c, WithPrefix(testPrefix(t, c)))
				require.NoError(t, err)
				return s
			})
	})

	t.Run("Admin", func(t *testing.T) {
		storetest.RunAdmin(t, func(t *testing.T) storekit.Store[storetest.Payload] {
			s, err := New[storetest.Payload](c, WithPrefix(testPrefix(t, c)))
			require.NoError(t, err)
			return s
		})
	})

	t.Run("QueuesOnTwoMasters", func(t *testing.T) {
		prefix := testPrefix(t, c)
		// Two queue names whose hash tags land on slots of different
		// masters.
		first := "q0"
		var second string
		for i := 1; second == "" && i < 1000; i++ {
			name := "q" + strconv.Itoa(i)
			if owner(t, c, "{"+prefix+":"+name+"}") != owner(t, c, "{"+prefix+":"+first+"}") {
				second = name
			}
		}
		require.NotEmpty(t, second, "no queue name whose slot another master serves")
		slot := func(name string) int64 {
			n, err := c.ClusterKeySlot(context.Background(), "{"+prefix+":"+name+"}").Result()
			require.NoError(t, err)
			return n
		}
		require.NotEqual(t, slot(first), slot(second))

		// Both queues at once, each in a subtest of its own.
		t.Run("run", func(t *testing.T) {
			for _, name := range []string{first, second} {
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					runClusterQueue(t, c, prefix, name, 300)
				})
			}
		})
		// Each queue's keys (its ID counter here) are on its own master only.
		for _, name := range []string{first, second} {
			meta := "{" + prefix + ":" + name + "}:ids"
			home := owner(t, c, meta)
			for _, a := range cl.addrs {
				n := redis.NewClient(&redis.Options{Addr: a})
				// EXISTS on a node that does not serve the slot answers MOVED.
				got, err := n.Exists(context.Background(), meta).Result()
				n.Close()
				if a == home {
					require.NoError(t, err)
					require.EqualValues(t, 1, got, "%s on its master %s", meta, a)
				} else {
					require.ErrorContains(t, err, "MOVED", "%s asked of %s", meta, a)
				}
			}
		}
	})
}

// runClusterQueue runs a queue named name on the cluster: n jobs
// enqueued one at a time, in a batch (EnqueueMany), keyed and scheduled,
// each of which must run once.
func runClusterQueue(t *testing.T, c *redis.ClusterClient, prefix, name string, n int) {
	s, err := New[int](c, WithPrefix(prefix))
	require.NoError(t, err)
	var mu sync.Mutex
	runs := map[int]int{}
	all := make(chan struct{})
	q, err := queue.NewWithStore(s, func(_ context.Context, j queue.Job[int]) error {
		mu.Lock()
		defer mu.Unlock()
		if runs[j.Payload]++; len(runs) == n && runs[j.Payload] == 1 {
			close(all)
		}
		return nil
	}, queue.WithName(name), queue.WithWorkers(4, 4), queue.WithCapacity(10*n, 0), queue.WithLogger(quietLogger()))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, q.Stop(sctx))
		require.NoError(t, s.Close(sctx))
	}()
	third := n / 3
	for i := range third {
		j := queue.Job[int]{Payload: i}
		switch i % 3 {
		case 1:
			j.Key = fmt.Sprintf("k%d", i)
		case 2:
			j.RunAt = time.Now().Add(20 * time.Millisecond)
		}
		require.NoError(t, q.Enqueue(ctx, j))
	}
	batch := make([]queue.Job[int], 0, n-third)
	for i := third; i < n; i++ {
		batch = append(batch, queue.Job[int]{Payload: i})
	}
	added, err := s.EnqueueMany(ctx, batch)
	require.NoError(t, err)
	require.Len(t, added, len(batch))
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("queue %s: %d of %d jobs ran", name, len(runs), n)
	}
	mu.Lock()
	defer mu.Unlock()
	for p, k := range runs {
		require.Equal(t, 1, k, "queue %s: job %d ran %d times", name, p, k)
	}
}
