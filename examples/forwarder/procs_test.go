package main

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// procsFeed drives a controller with readings procsWindow apart: each
// call to window reports a window in which the process used busy CPUs'
// worth of time.
type procsFeed struct {
	pc   *procsController
	now  time.Time
	cpu  time.Duration
	sets []int
}

func newProcsFeed(max int) *procsFeed {
	f := &procsFeed{now: time.Unix(1000, 0)}
	f.pc = newProcsController(max, func(n int) { f.sets = append(f.sets, n) }, nil)
	f.pc.apply(1)
	f.pc.observe(f.now, f.cpu) // the first reading only starts the count
	return f
}

func (f *procsFeed) window(busy float64) {
	f.now = f.now.Add(procsWindow)
	f.cpu += time.Duration(busy * float64(procsWindow))
	f.pc.observe(f.now, f.cpu)
}

func (f *procsFeed) windows(n int, busy float64) {
	for range n {
		f.window(busy)
	}
}

func TestProcsControllerDoublesWhileBusy(t *testing.T) {
	f := newProcsFeed(6)
	require.Equal(t, []int{1}, f.sets, "auto starts on one P")

	f.window(0.9)
	assert.Equal(t, 1, f.pc.cur, "one busy window is not enough")
	f.window(0.5)
	f.window(0.9)
	assert.Equal(t, 1, f.pc.cur, "the busy windows must be in a row")
	f.window(0.9)
	assert.Equal(t, 2, f.pc.cur, "two busy windows in a row double the count")

	f.windows(procsUpAfter, 0.8*2)
	assert.Equal(t, 2, f.pc.cur, "below procsHigh of two Ps")
	f.windows(procsUpAfter, 0.9*2)
	assert.Equal(t, 4, f.pc.cur)
	f.windows(procsUpAfter, 4)
	assert.Equal(t, 6, f.pc.cur, "doubled up to the ceiling, not past it")
	f.windows(20, 6)
	assert.Equal(t, 6, f.pc.cur)
	assert.Equal(t, []int{1, 2, 4, 6}, f.sets)
	assert.EqualValues(t, 4, f.pc.changes.Load())
}

func TestProcsControllerTakesOneAwayWhenIdle(t *testing.T) {
	f := newProcsFeed(4)
	f.windows(procsUpAfter, 1)
	f.windows(procsUpAfter, 2)
	require.Equal(t, 4, f.pc.cur)

	idle := procsLow*3 - 0.01 // at most procsLow of three Ps
	f.windows(procsDownAfter-1, idle)
	f.window(procsLow*3 + 0.1)
	f.windows(procsDownAfter-1, idle)
	assert.Equal(t, 4, f.pc.cur, "the idle windows must be in a row")
	f.window(idle)
	assert.Equal(t, 3, f.pc.cur, "procsDownAfter idle windows take one P away")
	f.windows(procsDownAfter, 0)
	f.windows(procsDownAfter, 0)
	assert.Equal(t, 1, f.pc.cur)
	f.windows(100, 0)
	assert.Equal(t, 1, f.pc.cur, "never below one")
	assert.Equal(t, []int{1, 2, 4, 3, 2, 1}, f.sets)
}

// A load between the two thresholds keeps the count where it is, up or
// down: two Ps cost more CPU per announce than one, so a load that raised
// the count reads higher once it has.
func TestProcsControllerHoldsBetweenThresholds(t *testing.T) {
	f := newProcsFeed(2)
	f.windows(1000, 0.8)
	assert.Equal(t, 1, f.pc.cur)
	f.windows(procsUpAfter, 1)
	require.Equal(t, 2, f.pc.cur)
	f.windows(1000, 1.0)
	assert.Equal(t, 2, f.pc.cur)
	assert.Equal(t, []int{1, 2}, f.sets)
}

func TestProcsControllerReadsLessOftenWhenIdle(t *testing.T) {
	f := newProcsFeed(2)
	f.window(0.01)
	assert.Equal(t, procsIdleEvery, f.pc.every(), "idle on one P: a reading a second")
	f.window(0.5)
	assert.Equal(t, procsWindow, f.pc.every(), "busy: a reading a window")
	f.windows(procsUpAfter, 2)
	require.Equal(t, 2, f.pc.cur)
	f.window(0)
	assert.Equal(t, procsWindow, f.pc.every(), "on two Ps it keeps reading each window, to take one away")
}

func TestProcsControllerIgnoresAStoppedClock(t *testing.T) {
	f := newProcsFeed(2)
	for range 10 {
		f.cpu += time.Second
		f.pc.observe(f.now, f.cpu) // no time has passed
	}
	assert.Equal(t, 1, f.pc.cur)
	f.window(0.9)
	assert.Equal(t, 1, f.pc.cur, "the CPU of a window with no wall time is not carried over as busy")
}

func TestStartProcs(t *testing.T) {
	t.Cleanup(func() { setProcs(procsStart) })
	pc, mode, stop := startProcs(3, nil)
	assert.Nil(t, pc)
	assert.Equal(t, "fixed at 3 (-procs)", mode)
	assert.Equal(t, 3, runtime.GOMAXPROCS(0))
	assert.EqualValues(t, 3, procsNow.Load())
	assert.Equal(t, max(3, procsStart), procsCeiling())
	stop()
	assert.Equal(t, procsStart, runtime.GOMAXPROCS(0), "stop gives the runtime its count back")
	assert.EqualValues(t, procsStart, procsNow.Load())

	t.Run("GOMAXPROCS", func(t *testing.T) {
		t.Setenv("GOMAXPROCS", "2")
		pc, mode, stop := startProcs(procsAuto, nil)
		defer stop()
		assert.Nil(t, pc)
		assert.Contains(t, mode, "(GOMAXPROCS)")
		assert.Equal(t, procsStart, runtime.GOMAXPROCS(0), "the runtime's own variable is left alone")
	})

	t.Run("auto", func(t *testing.T) {
		if procsStart < 2 {
			t.Skip("one CPU: auto keeps the runtime's count")
		}
		if _, ok := processCPU(); !ok {
			t.Skip("no process CPU time on this system")
		}
		var changes [][2]int
		pc, mode, stop := startProcs(procsAuto, func(from, to int) { changes = append(changes, [2]int{from, to}) })
		require.NotNil(t, pc)
		assert.Equal(t, "auto, 1 to "+strconv.Itoa(procsStart), mode)
		assert.Equal(t, 1, runtime.GOMAXPROCS(0), "auto starts on one P")
		assert.EqualValues(t, 1, procsNow.Load())
		assert.Equal(t, procsStart, procsCeiling(), "the helpers and accept loops are sized for the ceiling")
		stop() // waits for the controller's goroutine
		assert.Equal(t, [][2]int{{procsStart, 1}}, changes)
		assert.Equal(t, procsStart, runtime.GOMAXPROCS(0))
	})
}

func TestProcsArgs(t *testing.T) {
	up := []string{"-upstream", "http://127.0.0.1:1/announce"}
	_, s, err := parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, procsAuto, s.procs.n, "auto by default")
	assert.Equal(t, "auto", s.procs.String())

	t.Setenv("FORWARDER_PROCS", "3")
	_, s, err = parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 3, s.procs.n)
	_, s, err = parseArgs(append(up, "-procs", "auto"), &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, procsAuto, s.procs.n, "the flag wins")

	for _, v := range []string{"0", "-1", "two", ""} {
		var errOut bytes.Buffer
		_, _, err = parseArgs(append(up, "-procs", v), &errOut)
		assert.ErrorContains(t, err, "want auto or a number of CPUs >= 1", "%q", v)
		assert.Contains(t, err.Error(), "-procs", "%q", v)
	}
	t.Setenv("FORWARDER_PROCS", "many")
	_, _, err = parseArgs(up, &bytes.Buffer{})
	assert.ErrorContains(t, err, `environment variable FORWARDER_PROCS="many": want auto or a number of CPUs >= 1`)
}

func TestProcsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newProcsFeed(2)
	require.NoError(t, registerProcsMetrics(reg, f.pc))
	f.windows(procsUpAfter, 1)
	n, err := testutil.GatherAndCount(reg, "forwarder_procs", "forwarder_procs_changes_total")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP forwarder_procs_changes_total Times -procs auto changed the count of CPUs (forwarder_procs).
# TYPE forwarder_procs_changes_total counter
forwarder_procs_changes_total 2
`), "forwarder_procs_changes_total"))

	fixed := prometheus.NewRegistry()
	require.NoError(t, registerProcsMetrics(fixed, nil))
	n, err = testutil.GatherAndCount(fixed, "forwarder_procs_changes_total")
	require.NoError(t, err)
	assert.Zero(t, n, "a fixed count has no changes to count")
}
