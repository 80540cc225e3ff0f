package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errOut))
	help := errOut.String()
	for _, want := range []string{
		"-Q N", "FORWARDER_QUEUE_SIZE", "(default 10000)",
		"-w N", "FORWARDER_WORKERS", "-W N", "MAX_FORWARDER_WORKERS",
		"-queue-scale-threshold PCT", "QUEUE_SCALE_THRESHOLD",
		"-queue-throttle-threshold PCT", "QUEUE_THROTTLE_THRESHOLD",
		"-queue-throttle-top N", "QUEUE_THROTTLE_TOP",
		"-queue-rate-limit-threshold PCT", "QUEUE_RATE_LIMIT_THRESHOLD", "0 disables rate limiting",
		"-rate-limit-initial-ps TOKENS", "RATE_LIMIT_INITIAL_PER_SEC",
		"-rate-limit-initial-burst TOKENS", "RATE_LIMIT_INITIAL_BURST",
		"-forwarder-suspend SECONDS", "FORWARDER_SUSPEND_SECONDS", "(default 300s)",
		"-max-forwarders-per-announce N", "(default 100)",
		"-upstream", "FORWARDER_UPSTREAMS", "-listen ADDR", "(default 127.0.0.1:6969)", "-store", "FORWARDER_STORE", "-v",
		"-interval", "-upstream-timeout", "-demo", "-http SERVER", "FORWARDER_HTTP",
	} {
		assert.Contains(t, help, want)
	}
}

func TestArgsFromEnvironmentAndFlags(t *testing.T) {
	t.Setenv("FORWARDER_QUEUE_SIZE", "123")
	t.Setenv("FORWARDER_WORKERS", "3")
	t.Setenv("FORWARDER_UPSTREAMS", "a=http://127.0.0.1:1/announce, udp://127.0.0.1:2")
	t.Setenv("FORWARDER_INTERVAL", "5m")
	qc, s, err := parseArgs([]string{"-Q", "77", "--queue-throttle-top", "9"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 77, qc.QueueSize, "the flag wins")
	assert.Equal(t, 3, qc.Workers, "the variable applies")
	assert.Equal(t, 9, qc.ThrottleTopN)
	assert.Equal(t, []string{"a=http://127.0.0.1:1/announce", "udp://127.0.0.1:2"}, s.upstreams)
	assert.Equal(t, 5*time.Minute, s.interval)

	_, s, err = parseArgs([]string{"-upstream", "http://127.0.0.1:3/announce"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"http://127.0.0.1:3/announce"}, s.upstreams, "flags replace the variable's list")
}

func TestArgsErrors(t *testing.T) {
	t.Setenv("FORWARDER_WORKERS", "many")
	_, _, err := parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce"}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "FORWARDER_WORKERS")

	t.Setenv("FORWARDER_WORKERS", "")
	_, _, err = parseArgs(nil, &bytes.Buffer{})
	require.ErrorContains(t, err, "no upstreams")

	_, _, err = parseArgs([]string{"-upstream", "x", "-w", "8", "-W", "4"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "WithWorkers", "values are checked at start-up")

	for _, spec := range []string{"ftp://h/announce", "udp://h", "http:///announce", "::"} {
		_, err := ParseUpstream(spec, nil)
		assert.Error(t, err, spec)
	}
	up, err := ParseUpstream("http://127.0.0.1:9/announce?passkey=abc", nil)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9", up.Name)
	a, err := ParseAnnounce(query(nil), remote)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(up.client.(*httpAnnouncer).announceURL(a, EventStarted),
		"http://127.0.0.1:9/announce?passkey=abc&info_hash="), "an upstream's own query is kept")
}

func TestDemoPresetYieldsToFlags(t *testing.T) {
	qc, _, err := parseArgs([]string{"-demo", "1s", "-w", "3"}, &bytes.Buffer{})
	require.NoError(t, err)
	want := demoQueueConfig()
	want.Workers = 3
	assert.Equal(t, want, qc)
}

func TestDemoRunsAndExits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for 3 s")
	}
	var out bytes.Buffer
	s := settings{demo: 3 * time.Second}
	require.NoError(t, runDemo(context.Background(), demoQueueConfig(), s, &out))
	text := out.String()
	assert.Contains(t, text, "[  1s] fill")
	assert.Contains(t, text, "upstream  behaviour")
	assert.Contains(t, text, "gone-404")
	assert.Contains(t, text, "seen:")
	// The summary says what the numbers mean and that no job was lost.
	assert.Contains(t, text, "what the numbers mean:")
	assert.Contains(t, text, "Nothing was lost: every accepted forward is accounted for")
}

// The summary's explanation follows the figures: it tells a good run
// from a bad one and says what becomes of the jobs left at the end.
func TestDemoSummaryExplainsTheFigures(t *testing.T) {
	atEnd := queue.Stats{Running: 3}
	final := queue.Stats{Depth: 10, Store: storekit.Stats{Scheduled: 4, Waiting: 1},
		Counts: queue.Counts{Enqueued: 100, Done: 70, Dead: 2, Cancelled: 13, DroppedFull: 5, RateLimited: 7}}
	explain := func(atEnd, final queue.Stats, c clientCounts) string {
		var out bytes.Buffer
		explainSummary(&out, atEnd, final, c)
		return out.String()
	}

	good := explain(atEnd, final, clientCounts{sent: 40, ok: 40})
	assert.Contains(t, good, "every announce got an answer at once, and none an error")
	assert.Contains(t, good, "7 new peers' forwards were shed")
	assert.NotContains(t, good, "asked to come back later")
	assert.Contains(t, good, "5 forwards were refused with the queue full")
	assert.Contains(t, good, "70 done + 2 dead + 13 cancelled + 15 left = 100")
	assert.Contains(t, good, "The 15 forwards left at the end (10 ready, 4 scheduled for later, 1 waiting), 3 of them interrupted")
	assert.Contains(t, good, "dropped when the demo exits")

	final.Done = 66 // four still running when the demo gave up on them
	bad := explain(atEnd, final, clientCounts{sent: 40, ok: 28, limited: 10, errors: 2})
	assert.Contains(t, bad, "2 announces got no usable answer")
	assert.Contains(t, bad, "4 accepted forwards are not accounted for")
	assert.NotContains(t, bad, "Nothing was lost")

	final = queue.Stats{Counts: queue.Counts{Enqueued: 5, Done: 5}}
	clean := explain(queue.Stats{}, final, clientCounts{sent: 5, ok: 5})
	assert.NotContains(t, clean, "asked to come back later")
	assert.NotContains(t, clean, "left at the end")
	assert.Contains(t, clean, "5 done + 0 dead + 0 cancelled + 0 left = 5")
}

func TestForwardAndMaxPeersArgs(t *testing.T) {
	up := []string{"-upstream", "http://127.0.0.1:1/announce"}
	_, s, err := parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, ForwardPeer, s.forward, "per peer by default")
	assert.Equal(t, defaultMaxPeers, s.maxPeers)

	t.Setenv("FORWARDER_FORWARD", "torrent")
	t.Setenv("FORWARDER_MAX_PEERS", "5000")
	_, s, err = parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, ForwardTorrent, s.forward)
	assert.Equal(t, 5000, s.maxPeers)
	_, s, err = parseArgs(append(up, "-forward", "peer", "-max-peers", "7"), &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, ForwardPeer, s.forward, "the flag wins")
	assert.Equal(t, 7, s.maxPeers)

	for _, args := range [][]string{{"-forward", "swarm"}, {"-max-peers", "0"}} {
		_, _, err = parseArgs(append(up, args...), &bytes.Buffer{})
		assert.Error(t, err, "%v", args)
	}
	t.Setenv("FORWARDER_MAX_PEERS", "-1")
	_, _, err = parseArgs(up, &bytes.Buffer{})
	assert.ErrorContains(t, err, "FORWARDER_MAX_PEERS")

	t.Setenv("FORWARDER_MAX_PEERS", "")
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "-forward MODE")
	assert.Contains(t, errOut.String(), "-max-peers N")
}

func TestForwardBudgetArgs(t *testing.T) {
	up := []string{"-upstream", "http://127.0.0.1:1/announce"}
	_, s, err := parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, defaultForwardBudget, s.budget)

	t.Setenv("FORWARDER_FORWARD_BUDGET", "2ms")
	_, s, err = parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, 2*time.Millisecond, s.budget)
	_, s, err = parseArgs(append(up, "-forward-budget", "0"), &bytes.Buffer{})
	require.NoError(t, err)
	assert.Zero(t, s.budget, "the flag wins; 0 turns the budget off")

	_, _, err = parseArgs(append(up, "-forward-budget", "-1ms"), &bytes.Buffer{})
	assert.ErrorContains(t, err, "-forward-budget")
	t.Setenv("FORWARDER_FORWARD_BUDGET", "soon")
	_, _, err = parseArgs(up, &bytes.Buffer{})
	assert.ErrorContains(t, err, "FORWARDER_FORWARD_BUDGET")

	t.Setenv("FORWARDER_FORWARD_BUDGET", "")
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "-forward-budget LATENCY")

	_, err = NewForwarder(Options{Upstreams: []*Upstream{{Name: "up", client: nopAnnouncer{}}}, ForwardBudget: -time.Millisecond})
	assert.ErrorContains(t, err, "forward budget -1ms")
}

// -http picks the announce path's server: fast by default, std from the
// flag or FORWARDER_HTTP (the flag wins); any other value is refused by
// name.
func TestArgsHTTPServer(t *testing.T) {
	up := []string{"-upstream", "http://127.0.0.1:1/announce"}
	_, s, err := parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, httpFast, s.http, "the default")

	_, s, err = parseArgs(append([]string{"-http", "std"}, up...), &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, httpStd, s.http)

	t.Setenv("FORWARDER_HTTP", "std")
	_, s, err = parseArgs(up, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, httpStd, s.http, "the variable applies")
	_, s, err = parseArgs(append([]string{"-http", "fast"}, up...), &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, httpFast, s.http, "the flag wins")

	_, _, err = parseArgs(append([]string{"-http", "quick"}, up...), &bytes.Buffer{})
	assert.ErrorContains(t, err, `-http "quick": want fast or std`)
	t.Setenv("FORWARDER_HTTP", "Fast")
	_, _, err = parseArgs(up, &bytes.Buffer{})
	assert.ErrorContains(t, err, `FORWARDER_HTTP="Fast": want fast or std`)
}
