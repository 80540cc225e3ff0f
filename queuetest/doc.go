// Package queuetest helps a program test its own use of package queue:
// its handlers, options and shutdown, in fake time. Authors of a
// storekit.Store want package storetest, the contract every store passes.
//
// Build the queue inside a testing/synctest bubble and time is fake: a job
// scheduled an hour out runs after an hour of the bubble's time, at once.
// Start starts the queue and shuts it down when the test ends; Advance
// lets the bubble's time pass and waits for its effects; Settle waits
// without time passing; Drain stops the queue; CheckCounts checks that
// every accepted job is accounted for.
//
//	func TestReminder(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			var sent atomic.Int64
//			q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
//				sent.Add(1)
//				return nil
//			})
//			if err != nil {
//				t.Fatal(err)
//			}
//			queuetest.Start(t, q)
//			if err := q.EnqueueIn(context.Background(), queue.Job[string]{Payload: "renew"}, time.Hour); err != nil {
//				t.Fatal(err)
//			}
//			queuetest.Advance(time.Hour)
//			if sent.Load() != 1 {
//				t.Fatalf("sent %d reminders, want 1", sent.Load())
//			}
//			queuetest.CheckCounts(t, q)
//		})
//	}
//
// A handler that calls an HTTP service hangs a bubble when the call goes
// through a real socket, an httptest.Server's included: network I/O is
// not durably blocking, so the bubble's time never advances. Give the
// handler HTTPClient(h) (or Transport(h)) instead, which serves the
// http.Handler h in process: a downstream's 429, 5xx and slow answers
// then play out in fake time (a handler waiting for its request's
// context is cut short at the deadline, at once).
//
// A periodic job registered at the bubble's start (midnight UTC, a fire
// time of most schedules) first runs at its next fire time, never at
// once: Advance to it before looking.
//
// Where a bubble cannot reach, as in a test against a real PostgreSQL or
// Redis server, give the queue a FakeClock (queue.WithClock) and move its
// time with FakeClock.Advance, and wait for events with Counter and Await
// instead of sleeping.
package queuetest
