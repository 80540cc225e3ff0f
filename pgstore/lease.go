package pgstore

import (
	"time"
)

// Leases are judged by the database's clock. A lease's expiry is
// written as the server's statement_timestamp() plus the lease TTL, and
// the rescue compares it with statement_timestamp(): every process of a
// queue reads one clock, so a process whose clock is minutes ahead does
// not rescue another's live lease, and one whose clock is behind does not
// stamp leases that outlive its heartbeats. (Within one statement,
// statement_timestamp() is one value and lets the rescue use the lease
// index; clock_timestamp() would do neither.)
//
// The queue's clock still measures how much time passes: the database
// time used is statement_timestamp() plus how far the queue's clock has
// moved beyond real time since Init (leaseShift). With the system clock
// that is zero, whatever the clock reads (the difference of two
// time.Now() readings is measured on the monotonic clock, which a wall
// clock step does not move); a fake clock, which does not move by
// itself, steps leases forward by each Advance, so that tests still
// expire leases without waiting. A process's clock error thus does not
// matter to leases; what remains is its clock's rate error (parts per
// million) over one lease TTL. (A custom Clock whose readings lack
// time.Now's monotonic reading lets a wall clock step through: the step
// shifts that process's leases by its size.)
//
// Scheduled times (a job's RunAt, retry times) remain the queue's clock:
// they are times the caller gave, and a process whose clock is off
// promotes those jobs early or late by its error (see doc.go).

// leaseClock is what leaseShift measures from: the queue's clock and
// real time, read together at Init.
type leaseClock struct {
	clock time.Time // the queue's clock at Init
	real  time.Time // time.Now() at Init (with its monotonic reading)
}

// leaseShift returns how far the queue's clock has moved beyond real time
// since Init: zero for the system clock, each Advance less the real time
// passed for a fake one.
func (s *Store[T]) leaseShift() time.Duration {
	return s.cfg.Clock.Now().Sub(s.lc.clock) - time.Since(s.lc.real)
}

// leaseUntil returns the parameter of a statement that writes a lease:
// microseconds after statement_timestamp() (see dbTime) until the lease
// expires.
func (s *Store[T]) leaseUntil() int64 { return (s.leaseShift() + s.o.LeaseTTL).Microseconds() }

// dbTime is the SQL for the database's time shifted by param
// microseconds (a bigint parameter).
func dbTime(param string) string {
	return "(statement_timestamp() + " + param + "::bigint * interval '1 microsecond')"
}
