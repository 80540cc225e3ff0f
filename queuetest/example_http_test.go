package queuetest_test

import (
	"fmt"
	"io"
	"net/http"

	"github.com/queuekit/queue/queuetest"
)

// HTTPClient serves an http.Handler in process: give it to the code under
// test in place of its real client, and a handler that calls a downstream
// runs inside a testing/synctest bubble, where a real socket would hang.
func ExampleHTTPClient() {
	downstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("busy") != "" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintf(w, "announced %s", r.URL.Path)
	})
	client := queuetest.HTTPClient(downstream)

	resp, err := client.Get("http://tracker.test/peer1")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))

	resp, err = client.Get("http://tracker.test/peer2?busy=1")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After"))
	// Output:
	// 200 announced /peer1
	// 429 30
}
