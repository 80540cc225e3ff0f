package pgstore

import (
	"context"
	"sync"
	"time"
)

// notifyGap is the least time between two wake-up notifications sent for
// Adds: a NOTIFY takes a cluster-wide lock that is held through its
// transaction's commit, so notifying in every insert serialised all
// concurrent inserts (ten goroutines inserted more slowly than one).
const notifyGap = 5 * time.Millisecond

// notifier sends, for Add, the NOTIFY that wakes other processes: after the
// insert committed, from one goroutine, coalesced. Every Add that committed
// before a notification was sent is covered by it, and an Add that commits
// meanwhile gets the next one, at most notifyGap later; the adding process
// itself is woken at once, without a notification. EnqueueTx, EnqueueMany's
// batches without keys and the other statements that make jobs ready
// notify in their own transaction (at its commit); EnqueueMany with keys
// uses the notifier.
type notifier struct {
	mu      sync.Mutex
	pending bool // an Add committed since the last notification was sent
	running bool // the goroutine is started
	closed  bool
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func (n *notifier) init() {
	n.kick = make(chan struct{}, 1)
	n.stop = make(chan struct{})
	n.done = make(chan struct{})
}

// notifyAdded asks for a notification that a job was added (and committed).
func (s *Store[T]) notifyAdded() {
	n := &s.nt
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		s.sendNotify()
		return
	}
	n.pending = true
	if !n.running {
		n.running = true
		go s.notifyLoop()
	}
	n.mu.Unlock()
	kick(n.kick)
}

func (s *Store[T]) notifyLoop() {
	n := &s.nt
	defer close(n.done)
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-n.kick:
		case <-n.stop:
		}
		n.mu.Lock()
		send, closed := n.pending, n.closed
		n.pending = false
		n.mu.Unlock()
		if send {
			s.sendNotify()
		}
		if closed {
			return
		}
		if send {
			gap.Reset(notifyGap)
			select {
			case <-gap.C:
			case <-n.stop:
			}
		}
	}
}

// closeNotifier sends the notification still owed and stops the goroutine;
// later Adds notify by themselves.
func (s *Store[T]) closeNotifier() {
	n := &s.nt
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	running := n.running
	close(n.stop)
	n.mu.Unlock()
	if running {
		<-n.done
	}
}

func (s *Store[T]) sendNotify() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1::text, $2::text)", s.channel, s.cfg.Name); err != nil {
		// Not fatal: other processes find the job when they next poll.
		s.noteErr(err)
		s.cfg.Logger.Warn("pgstore: notify failed; other processes find the job at their next poll", "err", err)
	}
}
