package main

import (
	"math"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	testHash = [20]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	testPeer = [20]byte{'-', 'Q', 'K', '0', '0', '0', '1', '-', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l'}
	remote   = netip.MustParseAddrPort("192.0.2.7:40000")
)

// query builds an announce query from a valid base, with overrides; an
// override of "-" deletes the parameter.
func query(over map[string]string) string {
	v := url.Values{
		"info_hash":  {string(testHash[:])},
		"peer_id":    {string(testPeer[:])},
		"port":       {"6881"},
		"uploaded":   {"10"},
		"downloaded": {"20"},
		"left":       {"30"},
	}
	for k, val := range over {
		if val == "-" {
			v.Del(k)
		} else {
			v.Set(k, val)
		}
	}
	return v.Encode()
}

func TestParseAnnounceValid(t *testing.T) {
	a, err := ParseAnnounce(query(map[string]string{"event": "started", "numwant": "5", "key": "k1"}), remote)
	require.NoError(t, err)
	assert.Equal(t, testHash, a.InfoHash)
	assert.Equal(t, testPeer, a.PeerID)
	assert.Equal(t, netip.MustParseAddrPort("192.0.2.7:6881"), a.Addr, "connection address, announced port")
	assert.Equal(t, int64(10), a.Uploaded)
	assert.Equal(t, int64(20), a.Downloaded)
	assert.Equal(t, int64(30), a.Left)
	assert.Equal(t, EventStarted, a.Event)
	assert.Equal(t, 5, a.NumWant)
	assert.True(t, a.Compact, "compact unless compact=0")
	assert.Equal(t, "deadbeef0102030405060708090a0b0c0d0e0f10", a.HashHex())
	assert.Equal(t, "k1", a.Key)
}

func TestParseAnnounceDefaultsAndOptions(t *testing.T) {
	a, err := ParseAnnounce(query(map[string]string{"left": "-", "compact": "0", "no_peer_id": "1", "ip": "198.51.100.9"}), remote)
	require.NoError(t, err)
	assert.Equal(t, remote.Addr(), a.Addr.Addr(), "ip is not believed from a remote client")
	a, err = ParseAnnounce(query(map[string]string{"left": "-", "compact": "0", "no_peer_id": "1", "ip": "198.51.100.9"}),
		netip.MustParseAddrPort("127.0.0.1:5000"))
	require.NoError(t, err)
	assert.Equal(t, int64(-1), a.Left, "missing left is unknown")
	assert.False(t, a.Compact)
	assert.True(t, a.NoPeerID)
	assert.Equal(t, defaultNumWant, a.NumWant)
	assert.Equal(t, EventNone, a.Event)
	assert.Equal(t, netip.MustParseAddrPort("198.51.100.9:6881"), a.Addr, "ip is believed from a proxy on loopback")

	a, err = ParseAnnounce(query(map[string]string{"numwant": "100000", "ip": "tracker.example"}), remote)
	require.NoError(t, err)
	assert.Equal(t, maxNumWant, a.NumWant, "numwant is capped")
	assert.Equal(t, remote.Addr(), a.Addr.Addr(), "names in ip are ignored")

	a, err = ParseAnnounce(query(map[string]string{"numwant": "-1"}), remote)
	require.NoError(t, err)
	assert.Equal(t, defaultNumWant, a.NumWant)
}

// anacrolix/torrent announces a torrent whose size it does not know yet
// (a magnet link fetching its metadata) with left=MaxInt64; it must not be
// refused as invalid.
func TestParseAnnounceTakesEveryInt64(t *testing.T) {
	a, err := ParseAnnounce(query(map[string]string{
		"left": "9223372036854775807", "uploaded": "9223372036854775807", "downloaded": "9223372036854775807",
	}), remote)
	require.NoError(t, err)
	assert.Equal(t, int64(math.MaxInt64), a.Left)
	assert.Equal(t, int64(math.MaxInt64), a.Uploaded)
	assert.Equal(t, int64(math.MaxInt64), a.Downloaded)
}

func TestParseAnnounceBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		query  string
		reason string
	}{
		"info_hash 19 bytes":   {query(map[string]string{"info_hash": strings.Repeat("a", 19)}), "invalid info_hash: want 20 bytes, got 19"},
		"info_hash 21 bytes":   {query(map[string]string{"info_hash": strings.Repeat("a", 21)}), "invalid info_hash"},
		"info_hash as hex":     {query(map[string]string{"info_hash": strings.Repeat("ab", 20)}), "invalid info_hash"},
		"no info_hash":         {query(map[string]string{"info_hash": "-"}), "missing info_hash"},
		"two info_hash":        {query(nil) + "&info_hash=" + url.QueryEscape(string(testHash[:])), "more than one info_hash"},
		"short peer_id":        {query(map[string]string{"peer_id": "abc"}), "invalid peer_id"},
		"no peer_id":           {query(map[string]string{"peer_id": "-"}), "missing peer_id"},
		"no port":              {query(map[string]string{"port": "-"}), "missing port"},
		"port not a number":    {query(map[string]string{"port": "http"}), "invalid port"},
		"port zero":            {query(map[string]string{"port": "0"}), "invalid port"},
		"port too big":         {query(map[string]string{"port": "65536"}), "invalid port"},
		"uploaded not numeric": {query(map[string]string{"uploaded": "12abc"}), "invalid uploaded"},
		"downloaded negative":  {query(map[string]string{"downloaded": "-5"}), "invalid downloaded"},
		"left not numeric":     {query(map[string]string{"left": "lots"}), "invalid left"},
		"left overflow":        {query(map[string]string{"left": "99999999999999999999999"}), "invalid left"},
		"numwant not numeric":  {query(map[string]string{"numwant": "ten"}), "invalid numwant"},
		"unknown event":        {query(map[string]string{"event": "exploded"}), "invalid event"},
		"bad escape":           {query(nil) + "&x=%zz", "malformed query"},
		"oversize":             {query(map[string]string{"pad": strings.Repeat("x", maxQueryLen)}), "request too long"},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := ParseAnnounce(tc.query, remote)
			require.Error(t, err)
			assert.Nil(t, a)
			assert.True(t, isClientError(err))
			assert.Contains(t, err.Error(), tc.reason)
		})
	}
}

func FuzzParseAnnounce(f *testing.F) {
	f.Add(query(nil))
	f.Add(query(map[string]string{"event": "stopped", "compact": "0"}))
	f.Add("info_hash=%00&port=1")
	f.Fuzz(func(t *testing.T, q string) {
		a, err := ParseAnnounce(q, remote)
		if err == nil {
			if a.Addr.Port() == 0 || len(a.HashHex()) != 40 || a.NumWant < 0 || a.NumWant > maxNumWant {
				t.Fatalf("accepted a bad announce: %+v", a)
			}
		} else if !isClientError(err) {
			t.Fatalf("error is not a client error: %v", err)
		}
	})
}
