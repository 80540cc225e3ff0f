package redisstore

import (
	"testing"
	"time"

	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

func TestConformance(t *testing.T) {
	c := needRedis(t)
	storetest.Run(t, storetest.Features{Capacity: true, LeaseTTL: 30 * time.Second},
		func(t *testing.T) storekit.Store[storetest.Payload] {
			s, err := New[storetest.Payload](c, WithPrefix(testPrefix(t, c)))
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
}
