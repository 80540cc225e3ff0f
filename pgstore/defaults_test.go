package pgstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/storekit/durable"
	"github.com/queuekit/queue/storetest"
)

// TestDefaultsShowTheirValues: each exported Default… constant has its
// own doc comment and a value go doc can show, and agrees with the
// shared durable defaults.
func TestDefaultsShowTheirValues(t *testing.T) {
	storetest.CheckDefaults(t, "options.go")
	require.EqualValues(t, durable.DefaultMaxPayload, DefaultMaxPayload)
	require.EqualValues(t, durable.DefaultLeaseTTL, DefaultLeaseTTL)
	require.EqualValues(t, durable.DefaultLeaderTTL, DefaultLeaderTTL)
	require.EqualValues(t, durable.DefaultJanitorInterval, DefaultJanitorInterval)
	require.EqualValues(t, durable.DefaultDeadRetention, DefaultDeadRetention)
}
