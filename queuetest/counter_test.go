package queuetest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/queuekit/queue/queuetest"
)

func TestCounter(t *testing.T) {
	var c queuetest.Counter
	at3, again3 := c.Reached(3), c.Reached(3)
	select {
	case <-c.Reached(0):
	default:
		t.Fatal("Reached(0) not closed at once")
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(c.Add)
	}
	wg.Wait()
	queuetest.Await(t, at3, time.Minute, "the third event")
	queuetest.Await(t, again3, time.Minute, "the third event, second waiter")
	assert.Equal(t, 5, c.Load())
	select {
	case <-c.Reached(6):
		t.Fatal("Reached(6) closed after 5 events")
	default:
	}
}
