package queuetest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// A handler that calls a downstream over HTTP runs in a bubble: a 429
// suspends the target, a 502 is retried with backoff, and fake time moves
// both along, where a real socket (httptest.Server) would hang the test.
func TestHTTPClientInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls sync.Map // path → *atomic.Int32
		downstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := calls.LoadOrStore(r.URL.Path, new(atomic.Int32))
			switch c := n.(*atomic.Int32).Add(1); {
			case r.URL.Path == "/busy" && c == 1:
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
			case r.URL.Path == "/flaky" && c <= 2:
				http.Error(w, "bad gateway", http.StatusBadGateway)
			default:
				io.WriteString(w, "ok "+r.URL.Path)
			}
		})
		client := queuetest.HTTPClient(downstream)
		var mu sync.Mutex
		done := map[string]time.Time{}
		start := time.Now()
		var q *queue.Queue[string]
		q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://downstream.test"+j.Payload, strings.NewReader("hello"))
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return q.Classify(0, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if err := q.Classify(resp.StatusCode, nil); err != nil {
				return err
			}
			mu.Lock()
			done[string(body)] = time.Now()
			mu.Unlock()
			return nil
		}, queue.WithRetry(5, time.Second, time.Second), queue.WithSuspend(time.Minute, nil))
		require.NoError(t, err)
		queuetest.Start(t, q)
		require.NoError(t, q.Enqueue(t.Context(), queue.Job[string]{Target: "busy", Payload: "/busy"}))
		require.NoError(t, q.Enqueue(t.Context(), queue.Job[string]{Target: "flaky", Payload: "/flaky"}))
		queuetest.Advance(10 * time.Minute)
		mu.Lock()
		defer mu.Unlock()
		require.Contains(t, done, "ok /busy")
		require.Contains(t, done, "ok /flaky")
		assert.GreaterOrEqual(t, done["ok /busy"].Sub(start), time.Minute, "ran again only after the suspension")
		assert.Less(t, done["ok /flaky"].Sub(start), 5*time.Second, "two retries of at most a second's backoff")
		st := queuetest.CheckCounts(t, q)
		assert.Equal(t, uint64(2), st.Done)
		assert.Equal(t, uint64(3), st.Retried, "the 502s, and the 429 (an overloaded run uses an attempt)")
	})
}

// The transport honours the request's context: a handler that waits for
// it is cut short when the context ends, in fake time, and a body read
// after the context ended fails.
func TestTransportContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/stream" {
				io.WriteString(w, "first ")
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done()
		})
		client := queuetest.HTTPClient(slow)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://x.test/hang", nil)
		began := time.Now()
		_, err := client.Do(req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(began))

		// Streaming: the header and the first bytes come before the handler returns.
		ctx2, cancel2 := context.WithCancel(t.Context())
		req, _ = http.NewRequestWithContext(ctx2, http.MethodGet, "http://x.test/stream", nil)
		resp, err := client.Do(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		buf := make([]byte, 6)
		_, err = io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
		assert.Equal(t, "first ", string(buf))
		cancel2()
		_, err = io.ReadAll(resp.Body)
		assert.True(t, errors.Is(err, context.Canceled), "read after cancel: %v", err)
		require.NoError(t, resp.Body.Close())

		// A ctx already done never reaches the handler.
		req, _ = http.NewRequestWithContext(ctx2, http.MethodGet, "http://x.test/", nil)
		_, err = client.Do(req)
		assert.ErrorIs(t, err, context.Canceled)
		synctest.Wait()
	})
}

// A handler that panics before writing fails the round trip with an error
// naming the panic, as a server that drops the connection would.
func TestTransportHandlerPanics(t *testing.T) {
	client := queuetest.HTTPClient(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	_, err := client.Get("http://x.test/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "queuetest: handler panicked: boom")
}
