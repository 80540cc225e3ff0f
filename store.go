package queue

import (
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// The in-memory store meets the Store contract, ClaimCanceller,
// SlotStore and HoldStore.
var (
	_ storekit.Store[int]          = (*memstore.Store[int])(nil)
	_ storekit.ClaimCanceller[int] = (*memstore.Store[int])(nil)
	_ storekit.SlotStore           = (*memstore.Store[int])(nil)
	_ storekit.HoldStore[int]      = (*memstore.Store[int])(nil)
)

// Priority is one named priority level: a Name used in Job.Priority, a
// unique Weight ranking it (lower first) and its Share of the claims under
// weighted dispatch (0 on every level: strict). See WithPriorities.
type Priority = queuetype.Priority

// ScheduledJob describes one job waiting in the schedule.
type ScheduledJob = queuetype.ScheduledJob
