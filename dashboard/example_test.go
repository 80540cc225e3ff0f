package dashboard_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/dashboard"
)

// requireAdmin stands for the host's own authentication: here HTTP Basic
// with one fixed account; a real host checks its session or SSO instead.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(user+":"+pass), []byte("admin:s3cret")) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="queue dashboard"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The dashboard mounted at /dashboard/ behind the host's authentication,
// with target actions enabled.
func Example() {
	q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error { return nil },
		queue.WithName("mail"))
	if err != nil {
		log.Fatal(err)
	}
	// Run times and healthy targets come from the queue's own counters.
	dash, err := dashboard.New(q, dashboard.WithActions(true))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", requireAdmin(dash)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/dashboard/")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("without credentials:", resp.StatusCode)

	req, _ := http.NewRequest("GET", srv.URL+"/dashboard/", nil)
	req.SetBasicAuth("admin", "s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println("as admin:", resp.StatusCode, resp.Header.Get("Content-Type"))
	// Output:
	// without credentials: 401
	// as admin: 200 text/html; charset=utf-8
}
