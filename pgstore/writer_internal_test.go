package pgstore

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// gatedWriter is a writer whose batches the test lets through one at a
// time: execute hands each batch to the test and waits for its release.
type gatedWriter struct {
	w       writer
	batches chan []*op
	release chan struct{}
}

func newGatedWriter(max int, limits lingerLimits) *gatedWriter {
	g := &gatedWriter{batches: make(chan []*op), release: make(chan struct{})}
	g.w.init(max)
	g.w.limits = limits
	g.w.execute = func(batch []*op) {
		g.batches <- batch
		<-g.release
	}
	return g
}

// TestWriterWaitsForReturningCallers runs callers that submit again as
// soon as their op is written (workers with no-op jobs). Each batch after
// the first must carry every caller: written as soon as the first of them
// came back, the batches split the callers into groups, and each caller
// waited for the others' commit before its own.
func TestWriterWaitsForReturningCallers(t *testing.T) {
	const callers, rounds = 50, 20
	// The wait ends as soon as every caller is in; the limits are only
	// there to keep a broken writer from hanging the test.
	g := newGatedWriter(1000, lingerLimits{gap: time.Minute, most: time.Minute, floor: time.Minute})
	// Caller c submits rounds[c] ops, its ID in each. The callers of the
	// first batch are a round ahead of the others from then on, so the
	// others make one round fewer and all end in the same batch (after
	// which the writer has nobody to wait for).
	n := make([]int, callers)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for r := 0; r == 0 || r < n[c]; r++ {
				if res := g.w.submit(context.Background(), &op{kind: opComplete, id: int64(c)}); res.err != nil {
					t.Error(res.err)
					return
				}
			}
		})
	}
	written, total := 0, callers*rounds
	for i := 0; written < total; i++ {
		batch := <-g.batches
		written += len(batch)
		if i == 0 {
			// The first batch goes out with whoever came first; it
			// commits once every caller is in line (none sleeps, so each
			// gets there after a few turns).
			for len(batch)+len(g.w.ch) < callers {
				runtime.Gosched()
			}
			for c := range n {
				n[c] = rounds - 1
			}
			for _, o := range batch {
				n[o.id] = rounds
			}
			total = len(batch) + (callers-len(batch))*(rounds-1) + len(batch)*(rounds-1)
		} else if len(batch) != callers {
			t.Errorf("batch %d carries %d ops; want all %d callers", i, len(batch), callers)
		}
		g.release <- struct{}{}
	}
	wg.Wait()
	g.w.close()
}

// TestWriterStopsWaitingForBusyCallers checks that callers busy elsewhere
// (long jobs) are waited for only while ops keep coming, and that a wait
// that found too few of them turns waiting off for the next batches.
func TestWriterStopsWaitingForBusyCallers(t *testing.T) {
	var w writer
	w.init(1000)
	w.limits = lingerLimits{gap: time.Millisecond, most: time.Minute, floor: time.Minute}
	// Ten callers are expected back and none comes: the op already there
	// goes out alone after a gap with no op.
	if got := w.collect([]*op{{kind: opComplete}}, 10, 0); len(got) != 1 {
		t.Fatalf("batch of %d ops, want the lone one", len(got))
	}
	if w.pause != 1 {
		t.Fatalf("pause %d after a wait that brought nobody, want 1", w.pause)
	}
	// The next batch does not wait, and the next failure pauses longer.
	w.collect([]*op{{kind: opComplete}}, 10, 0)
	if w.pause != 0 {
		t.Fatalf("pause %d after a batch that did not wait, want 0", w.pause)
	}
	w.collect([]*op{{kind: opComplete}}, 10, 0)
	if w.pause != 2 {
		t.Fatalf("pause %d after a second wait that brought nobody, want 2", w.pause)
	}
	for range 2 {
		w.collect([]*op{{kind: opComplete}}, 10, 0)
	}
	// Half of those expected is enough: waiting stays on.
	for range 4 {
		w.ch <- &op{kind: opComplete}
	}
	if got := w.collect([]*op{{kind: opComplete}}, 10, 0); len(got) != 5 || w.pause != 0 || w.backoff != 0 {
		t.Fatalf("batch of %d ops, pause %d, backoff %d; want 5, 0, 0", len(got), w.pause, w.backoff)
	}
}
