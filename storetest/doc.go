// Package storetest is the conformance kit for authors of a storekit.Store:
// the contract every store passes, and the tools a store's own tests need.
// A program that only uses a queue wants package queuetest instead.
//
// Run checks the contract, one subtest per behaviour: priority order,
// schedules that are never early, keys, coalesced reruns and groups,
// unique windows,
// retries, deferrals, cancellation, capacity, Drain, concurrent claimers,
// error texts with NUL and invalid UTF-8 (ErrorText), keys and groups of
// any bytes and length (OddKeys), RunAt handed back as enqueued
// (RunAtKept)
// and, for a store that implements storekit.Leaser, lease rescue; for a
// store that implements storekit.TargetStore, target state (TargetState):
// entries load back field for field, the last write wins, an empty entry
// deletes, and every write is announced to WatchTargets, which the suite
// registers before Start; for a store that implements queue.HoldStore,
// that ReleaseHeld makes due the jobs Hold put back for a target and only
// those. The
// in-memory store, pgstore and redisstore all pass it. A store declares
// the optional behaviours it has with Features; each subtest binds a new
// store with Config and a queuetest.FakeClock that it advances.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Features{Capacity: true, LeaseTTL: 30 * time.Second},
//			func(t *testing.T) storekit.Store[storetest.Payload] {
//				// A new, empty store for each subtest.
//				s, err := mystore.New[storetest.Payload](client, mystore.WithPrefix(uniquePrefix(t)))
//				if err != nil {
//					t.Fatal(err)
//				}
//				return s
//			})
//	}
//
// For the store's own tests, Config binds a store the way the suite does,
// EventLog records what the store reports, and Proxy stands between the
// store and its server to cut its connections or make the server look
// unreachable, without touching a server other tests share.
package storetest
