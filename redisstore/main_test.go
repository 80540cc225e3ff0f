package redisstore

import (
	"flag"
	"os"
	"testing"
)

// TestMain makes every store of the package's tests use the inbox from
// its first Add (see loneStart), so that the conformance suite and the
// other tests run through it; TestLoneAdd checks the start. Benchmarks
// keep the default.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		loneStart = 0
	}
	os.Exit(m.Run())
}
