package durable

import (
	"fmt"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// CheckUniqueFor returns the error for a job's unique window that the
// queue's Enqueue would refuse (a negative one, or one without a key),
// for a store's own enqueue paths (EnqueueMany, EnqueueTx), which do not
// pass through Enqueue; nil if it is valid.
func CheckUniqueFor(window time.Duration, key string) error {
	switch {
	case window < 0:
		return fmt.Errorf("%w: UniqueFor is %v; it must be >= 0 (0 means no unique window)", queuetype.ErrInvalidJob, window)
	case window > 0 && key == "":
		return fmt.Errorf("%w: UniqueFor is %v but Key is empty; a unique window holds a Key: set one, or leave UniqueFor zero", queuetype.ErrInvalidJob, window)
	}
	return nil
}

// CheckTarget returns the error the queue's Enqueue returns for a job's
// Target that is not a valid name (core.TargetProblem), for a store's own
// enqueue paths; nil if it is valid.
func CheckTarget(target string) error {
	if p := storekit.TargetProblem(target); p != "" {
		return fmt.Errorf("%w: %s", queuetype.ErrInvalidJob, p)
	}
	return nil
}

// CheckMeta returns the error the queue's Enqueue returns for a job's
// metadata that breaks the rules of queuetype.Meta.Check, for a store's
// own enqueue paths; nil if it is valid.
func CheckMeta(m queuetype.Meta) error {
	if m.IsZero() {
		return nil
	}
	if err := m.Check(); err != nil {
		return fmt.Errorf("%w: %w", queuetype.ErrInvalidJob, err)
	}
	return nil
}

// WindowDuplicate returns the *queue.DuplicateError for a job refused
// because key is in a unique window (Job.UniqueFor) that has not ended.
func WindowDuplicate(key string) error { return queuetype.WindowDuplicate(key) }
