package main

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseReplyPeers(t *testing.T) {
	compact := string([]byte{10, 0, 0, 1, 0x1a, 0xe1, 10, 0, 0, 2, 0x1a, 0xe2})
	v6 := string(append(netip.MustParseAddr("2001:db8::1").AsSlice(), 0x1a, 0xe3))
	for name, tc := range map[string]struct {
		body any
		want []netip.AddrPort
	}{
		"compact": {map[string]any{"interval": 900, "peers": compact},
			[]netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:6881"), netip.MustParseAddrPort("10.0.0.2:6882")}},
		"compact and peers6": {map[string]any{"interval": 900, "peers": compact[:6], "peers6": v6},
			[]netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:6881"), netip.MustParseAddrPort("[2001:db8::1]:6883")}},
		"dict": {map[string]any{"interval": 900, "peers": []map[string]any{
			{"peer id": "01234567890123456789", "ip": "10.0.0.3", "port": 51413},
			{"ip": "2001:db8::2", "port": 6881},
			{"ip": "peer.example", "port": 6881}, // names are skipped
			{"ip": "10.0.0.4", "port": 0},        // so are bad ports
		}}, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.3:51413"), netip.MustParseAddrPort("[2001:db8::2]:6881")}},
		"no peers": {map[string]any{"interval": 900}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := ParseReply(bencode.MustMarshal(tc.body))
			require.NoError(t, err)
			assert.Equal(t, 15*time.Minute, r.Interval)
			assert.Equal(t, tc.want, r.Peers)
			assert.Empty(t, r.Failure)
		})
	}
}

func TestParseReplyCountsAndIntervals(t *testing.T) {
	r, err := ParseReply(bencode.MustMarshal(map[string]any{
		"interval": 1800, "min interval": 60, "complete": 5, "incomplete": 7, "warning message": "hi", "peers": "",
		"tracker id": "ignored", "external ip": "x",
	}))
	require.NoError(t, err)
	assert.Equal(t, 30*time.Minute, r.Interval)
	assert.Equal(t, time.Minute, r.MinInterval)
	assert.Equal(t, int64(5), r.Complete)
	assert.Equal(t, int64(7), r.Incomplete)
	assert.Equal(t, "hi", r.Warning)
}

func TestParseReplyBEP31(t *testing.T) {
	for name, tc := range map[string]struct {
		retryIn any
		never   bool
		d       time.Duration
	}{
		"minutes":           {5, false, 5 * time.Minute},
		"zero":              {0, false, 0},
		"never":             {"never", true, 0},
		"Never":             {"Never", true, 0},
		"minutes as string": {"3", false, 3 * time.Minute},
		"past the ceiling":  {60, false, time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := ParseReply(bencode.MustMarshal(map[string]any{"failure reason": "busy", "retry in": tc.retryIn}))
			require.NoError(t, err)
			assert.Equal(t, "busy", r.Failure)
			assert.True(t, r.HasRetry)
			assert.Equal(t, tc.never, r.RetryNever)
			assert.Equal(t, tc.d, r.RetryIn)
		})
	}
	r, err := ParseReply(bencode.MustMarshal(map[string]any{"failure reason": "unregistered torrent"}))
	require.NoError(t, err)
	assert.False(t, r.HasRetry, "a plain failure has no retry")

	for _, bad := range []any{-1, "soon", []int{1}} {
		_, err := ParseReply(bencode.MustMarshal(map[string]any{"failure reason": "x", "retry in": bad}))
		assert.ErrorIs(t, err, errGarbage, "retry in %v", bad)
	}
}

func TestParseReplyGarbage(t *testing.T) {
	for name, body := range map[string]string{
		"empty":              "",
		"html":               "<html>502 Bad Gateway</html>",
		"list":               "li1ee",
		"truncated":          "d8:intervali",
		"bad compact length": "d8:intervali60e5:peers5:abcdee",
		"peers an int":       "d5:peersi3ee",
		"interval a string":  "d8:interval3:abce",
		"huge string length": "d5:peers99999999999:abce",
	} {
		t.Run(name, func(t *testing.T) {
			r, err := ParseReply([]byte(body))
			assert.Nil(t, r)
			assert.True(t, errors.Is(err, errGarbage), "got %v", err)
		})
	}
}

// A reply nested deeper than any tracker's is refused before the
// bencode decoder, which recurses once per level, sees it: a 1 MiB reply
// of nested lists took it 512 MiB of stack, and under -race overflowed
// the stack and killed the process.
func TestParseReplyRefusesDeepNesting(t *testing.T) {
	deep := func(prefix string, n int) []byte {
		return []byte(prefix + strings.Repeat("l", n) + strings.Repeat("e", n) + "e")
	}
	for name, body := range map[string][]byte{
		"in peers":       deep("d5:peers", 10000),
		"in unknown key": deep("d3:xyz", 10000),
		"in retry in":    deep("d14:failure reason1:x8:retry in", 10000),
		"just past":      deep("d3:xyz", maxReplyDepth),
	} {
		r, err := ParseReply(body)
		assert.Nil(t, r, name)
		assert.ErrorIs(t, err, errGarbage, name)
	}
	// Strings holding 'l' and 'd' bytes are not nesting, and a reply as
	// deep as the limit still parses.
	body := []byte("d5:peersld2:ip8:10.0.0.14:porti1eee6:peers618:" + strings.Repeat("l", 16) + "dd" +
		"3:xyz" + strings.Repeat("l", maxReplyDepth-1) + strings.Repeat("e", maxReplyDepth-1) + "e")
	r, err := ParseReply(body)
	require.NoError(t, err)
	assert.Len(t, r.Peers, 2)
}

// A string's declared length is not trusted: a reply of a few bytes that
// declares a 128 MiB string is refused without allocating it. (The
// bencode decoder of anacrolix/torrent before v1.62 allocated the whole
// declared length before reading it, so 20 bytes from a hostile upstream
// cost 128 MiB, per job.)
func TestParseReplyDoesNotTrustStringLengths(t *testing.T) {
	const declared = 1<<27 - 2 // just under the decoder's string limit
	for name, body := range map[string]string{
		"failure reason": fmt.Sprintf("d14:failure reason%d:busye", declared),
		"peers":          fmt.Sprintf("d5:peers%d:abcdee", declared),
		"retry in":       fmt.Sprintf("d8:retry in%d:5e", declared),
		"unknown key":    fmt.Sprintf("d3:xyz%d:e", declared),
		"dict key":       fmt.Sprintf("d%d:xyz", declared),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := ParseReply([]byte(body))
		runtime.ReadMemStats(&after)
		assert.Nil(t, r, name)
		assert.ErrorIs(t, err, errGarbage, name)
		allocated := after.TotalAlloc - before.TotalAlloc
		assert.Less(t, allocated, uint64(1<<20), "%s: a %d-byte reply allocated %d bytes", name, len(body), allocated)
	}
}

func FuzzParseReply(f *testing.F) {
	f.Add([]byte("d8:intervali60e5:peers6:abcdefe"))
	f.Add([]byte("d14:failure reason4:busy8:retry ini5ee"))
	f.Add([]byte("d5:peersld2:ip8:10.0.0.14:porti1eeee"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseReply(body)
		if err == nil && r == nil {
			t.Fatal("nil reply without error")
		}
	})
}

func TestEncodePeersCompactAndDict(t *testing.T) {
	peers := []Peer{
		{Addr: netip.MustParseAddrPort("10.0.0.1:6881"), ID: testPeer, HasID: true},
		{Addr: netip.MustParseAddrPort("[2001:db8::1]:6882")},
	}
	var resp announceResponse
	encodePeers(&resp, peers, true, false)
	assert.Equal(t, string([]byte{10, 0, 0, 1, 0x1a, 0xe1}), resp.Peers)
	assert.Equal(t, string(append(netip.MustParseAddr("2001:db8::1").AsSlice(), 0x1a, 0xe2)), resp.Peers6)

	// Round trip through the reply parser, which reads both forms.
	r, err := ParseReply(bencode.MustMarshal(resp))
	require.NoError(t, err)
	assert.Equal(t, []netip.AddrPort{peers[0].Addr, peers[1].Addr}, r.Peers)

	resp = announceResponse{}
	encodePeers(&resp, peers, false, false)
	var dict struct {
		Peers []struct {
			ID   string `bencode:"peer id"`
			IP   string `bencode:"ip"`
			Port int    `bencode:"port"`
		} `bencode:"peers"`
	}
	require.NoError(t, bencode.Unmarshal(bencode.MustMarshal(resp), &dict))
	require.Len(t, dict.Peers, 2)
	assert.Equal(t, string(testPeer[:]), dict.Peers[0].ID)
	assert.Equal(t, "10.0.0.1", dict.Peers[0].IP)
	assert.Equal(t, 6881, dict.Peers[0].Port)
	assert.Equal(t, "2001:db8::1", dict.Peers[1].IP)

	resp = announceResponse{}
	encodePeers(&resp, peers, false, true)
	require.NoError(t, bencode.Unmarshal(bencode.MustMarshal(resp), &dict))
	assert.Empty(t, dict.Peers[0].ID, "no_peer_id=1 drops ids")
}

func TestEncodeFailure(t *testing.T) {
	var f struct {
		Reason   string `bencode:"failure reason"`
		Interval int    `bencode:"interval"`
	}
	require.NoError(t, bencode.Unmarshal(encodeFailure("tracker busy, retry in 10 seconds", 10*time.Second), &f))
	assert.Equal(t, "tracker busy, retry in 10 seconds", f.Reason)
	assert.Equal(t, 10, f.Interval)
}
