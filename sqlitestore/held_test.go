package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

// TestHeldMillion reports the file size and the process's memory with a
// million jobs held (scheduled an hour ahead, each with a key), the queue
// running over them:
//
//	SQLITESTORE_HELD=1000000 go test -run TestHeldMillion -v ./sqlitestore
func TestHeldMillion(t *testing.T) {
	n := envN("SQLITESTORE_HELD")
	if n == 0 {
		t.Skip("set SQLITESTORE_HELD to the number of jobs")
	}
	path := filepath.Join(t.TempDir(), "held.db")
	db := openDBAt(t, path)
	s, err := sqlitestore.New[int](db)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Now().Add(time.Hour)
	batch := make([]queue.Job[int], 0, 1000)
	start := time.Now()
	for i := range n {
		batch = append(batch, queue.Job[int]{Key: "held-" + itoa(i), RunAt: at, Payload: i})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := s.EnqueueMany(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	took := time.Since(start)
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the queue idles over the held jobs: what it holds then
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	size := fileSize(path) + fileSize(path+"-wal")
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d held jobs (scheduled %d) enqueued in %v: file %.1f MB (%d bytes a job), Go heap in use %.1f MB, RSS %s",
		n, st.Scheduled, took.Round(time.Millisecond), float64(size)/1e6, size/int64(n), float64(ms.HeapInuse)/1e6, rss())
	_ = q.Shutdown(ctx)
}

func envN(name string) int {
	n := 0
	for _, c := range os.Getenv(name) {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for ; i > 0; i /= 10 {
		p--
		b[p] = byte('0' + i%10)
	}
	return string(b[p:])
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// rss reads the process's resident set from /proc (Linux).
func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range splitLines(string(b)) {
		if len(line) > 6 && line[:6] == "VmRSS:" {
			return line[6:]
		}
	}
	return "unknown"
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

func openDBAt(t testing.TB, path string) *sqlitestore.DB {
	t.Helper()
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := sqlitestore.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}
