package storetest

import (
	"sync"

	"github.com/queuekit/queue"
)

// EventLog records the events a store reports through storekit.Config.Report,
// for a test to count them. The zero value is ready to use; it is safe
// for concurrent use.
type EventLog struct {
	mu     sync.Mutex
	events []queue.Event
}

// Report appends ev; it is a storekit.Config.Report function.
func (l *EventLog) Report(ev queue.Event) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

// Count returns how many events of kind were reported.
func (l *EventLog) Count(kind queue.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}
