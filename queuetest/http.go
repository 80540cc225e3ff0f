package queuetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// Transport returns an http.RoundTripper that serves every request with h,
// in process, on a goroutine of the caller's: no socket, so a handler that
// makes HTTP calls through it runs inside a testing/synctest bubble, where
// a real connection (an httptest.Server's included) is not durably
// blocking and hangs the test. Every URL reaches h, whatever its host.
//
// The response streams: RoundTrip returns once h has written its header
// (WriteHeader, a first Write, or Flush) or returned, and the body yields
// what h writes as it writes it. The request's context is h's; when it
// ends, RoundTrip or a body read waiting for h returns the context's
// error, as a real transport does. A panic in h before it wrote its header
// fails the round trip with an error naming the panic; after, the body
// read fails with it. Closing the body early makes h's later writes fail.
func Transport(h http.Handler) http.RoundTripper { return transport{h} }

// HTTPClient returns an http.Client whose Transport is Transport(h).
func HTTPClient(h http.Handler) *http.Client { return &http.Client{Transport: Transport(h)} }

type transport struct{ h http.Handler }

// RoundTrip implements http.RoundTripper.
func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	pr, pw := io.Pipe()
	w := &responseWriter{header: http.Header{}, body: pw, ready: make(chan struct{})}
	sreq := req.Clone(ctx)
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr = "192.0.2.1:1234" // as httptest.NewRequest
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	go t.serve(w, sreq, req)

	select {
	case <-w.ready:
	case <-ctx.Done():
		pw.CloseWithError(ctx.Err()) // h's writes fail from now on
		return nil, ctx.Err()
	}
	if w.failed != nil {
		return nil, w.failed
	}
	// The writing end, closed with the context's error, gives that error to
	// the reads (the reading end's own error would be io.ErrClosedPipe).
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	resp := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		ContentLength: -1,
		Body:          &responseBody{pr: pr, stop: stop},
		Request:       req,
	}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil {
		resp.ContentLength = n
	}
	return resp, nil
}

// serve runs h and ends the response when it returns or panics.
func (t transport) serve(w *responseWriter, sreq, req *http.Request) {
	defer closeBody(req)
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("queuetest: handler panicked: %v", v)
			if !w.commit(0, err) {
				w.body.CloseWithError(err)
			}
			return
		}
		w.commit(http.StatusOK, nil)
		// A handler that returned because the request's context ended
		// cut the body short: the client reads the context's error, not
		// a clean end.
		w.body.CloseWithError(sreq.Context().Err())
	}()
	t.h.ServeHTTP(w, sreq)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// responseWriter is the http.ResponseWriter h writes to: the header is
// sent (ready closed) at its first WriteHeader, Write or Flush, and the
// body goes through a pipe to the client's reads.
type responseWriter struct {
	header http.Header
	body   *io.PipeWriter
	ready  chan struct{}

	once   sync.Once
	status int         // set before ready is closed
	sent   http.Header // the header as sent
	failed error       // the handler panicked before sending
}

// commit sends the header with status, or fails the round trip with err;
// it reports whether this call sent it.
func (w *responseWriter) commit(status int, err error) (sent bool) {
	w.once.Do(func() {
		w.status, w.sent, w.failed = status, w.header.Clone(), err
		close(w.ready)
		sent = true
	})
	return sent
}

// Header implements http.ResponseWriter.
func (w *responseWriter) Header() http.Header { return w.header }

// WriteHeader implements http.ResponseWriter; calls after the first are
// ignored, as net/http's server does (without its log line).
func (w *responseWriter) WriteHeader(status int) { w.commit(status, nil) }

// Write implements http.ResponseWriter: it blocks until the client reads
// the bytes, and fails once the client closed the body or its context
// ended.
func (w *responseWriter) Write(b []byte) (int, error) {
	w.commit(http.StatusOK, nil)
	return w.body.Write(b)
}

// Flush implements http.Flusher: it sends the header. The body needs no
// flushing, its writes being unbuffered.
func (w *responseWriter) Flush() { w.commit(http.StatusOK, nil) }

// responseBody is the response's Body: the pipe's reading end.
type responseBody struct {
	pr   *io.PipeReader
	stop func() bool // stops closing pr when the request's context ends
}

func (b *responseBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *responseBody) Close() error {
	b.stop()
	return b.pr.Close()
}
