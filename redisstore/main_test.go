package redisstore

import (
	"os"
	"testing"
)

// TestMain makes every store of the package's tests use the inbox from
// its first Add (see loneStart), so that the conformance suite and the
// other tests run through it; TestLoneAdd checks the default start, and
// the benchmarks measure it (benchDefaults).
func TestMain(m *testing.M) {
	loneStart = 0
	os.Exit(m.Run())
}

// benchDefaults gives the stores a benchmark opens the package's defaults
// (loneStart). Benchmarks run after every test has returned.
func benchDefaults() { loneStart = defaultLoneStart }
