package main

import (
	"encoding/binary"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// strictQuery splits a raw query the way opentracker reads one: '&'
// between parameters, %XX escapes, and '+' a literal plus, not a space.
func strictQuery(t *testing.T, raw string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kv := range strings.SplitSeq(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		dec, err := url.PathUnescape(v) // %XX only; '+' stays '+'
		require.NoError(t, err, "parameter %s", k)
		out[k] = dec
	}
	return out
}

func TestEscapeQueryEveryByte(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	var b strings.Builder
	escapeQuery(&b, all)
	got := b.String()
	assert.NotContains(t, got, "+", "a space must be %20: trackers read '+' literally")
	for _, c := range "&=#? " {
		assert.NotContains(t, got, string(c))
	}
	dec, err := url.PathUnescape(got)
	require.NoError(t, err)
	assert.Equal(t, all, []byte(dec))
	assert.Equal(t, "az-._~09%20%2B%25", escapeString("az-._~09 +%"))
}

func escapeString(s string) string {
	var b strings.Builder
	escapeQuery(&b, s)
	return b.String()
}

// An info hash holding bytes that form encoding would change (a space
// became '+') must reach a tracker that decodes only %XX unchanged; with
// url.QueryEscape, opentracker refused such torrents as not whitelisted.
func TestAnnounceURLSurvivesAStrictDecoder(t *testing.T) {
	hash := [20]byte{0x1c, 0x98, 0x20, '+', '%', '&', '=', '#', '~', 'a', 0, 0xff, ' ', '?', '/'}
	peer := [20]byte{'-', 'A', '2', '-', '1', '-', '3', '6', '-', ' ', '+', 0x80}
	a, err := ParseAnnounce(query(map[string]string{
		"info_hash": string(hash[:]), "peer_id": string(peer[:]), "key": "k +&=",
	}), remote)
	require.NoError(t, err)
	up, err := ParseUpstream("http://127.0.0.1:9/announce", nil)
	require.NoError(t, err)
	u, err := url.Parse(up.client.(*httpAnnouncer).announceURL(a, EventStarted))
	require.NoError(t, err)
	q := strictQuery(t, u.RawQuery)
	assert.Equal(t, string(hash[:]), q["info_hash"])
	assert.Equal(t, string(peer[:]), q["peer_id"])
	assert.Equal(t, "k +&=", q["key"])
	assert.Equal(t, "started", q["event"])
}

// A client that sends no left (a magnet link fetching its metadata) is
// announced upstream as a leecher with a left all the same: chihaya
// refuses an announce without one ("failed to parse parameter: left"),
// BEP 15 has no way to leave it out, and 0 would count it as a seeder.
func TestUnknownLeftReachesUpstreamsAsALeecher(t *testing.T) {
	up, err := ParseUpstream("http://127.0.0.1:9/announce", nil)
	require.NoError(t, err)
	for left, want := range map[string]int64{"-": unknownLeft, "0": 0, "5": 5} {
		a, err := ParseAnnounce(query(map[string]string{"left": left}), remote)
		require.NoError(t, err)
		u, err := url.Parse(up.client.(*httpAnnouncer).announceURL(a, EventNone))
		require.NoError(t, err)
		assert.Equal(t, strconv.FormatInt(want, 10), strictQuery(t, u.RawQuery)["left"], "HTTP, left=%s", left)
		req := udpAnnounceRequest(1, a, EventNone, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9})
		assert.Equal(t, uint64(want), binary.BigEndian.Uint64(req[64:72]), "UDP, left=%s", left)
	}
}

// A link-local IPv6 client's address carries a zone (fe80::1%eth0) that
// means nothing off this host. Passed on as is, its '%' made the upstream
// query malformed: chihaya refuses such an announce ("invalid query
// escape"), and opentracker built to read ip answers HTTP 400, which
// disables the upstream.
func TestClientAddressZoneIsDropped(t *testing.T) {
	a, err := ParseAnnounce(query(nil), netip.MustParseAddrPort("[fe80::1%eth0]:5000"))
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddrPort("[fe80::1]:6881"), a.Addr)
	up, err := ParseUpstream("http://127.0.0.1:9/announce", nil)
	require.NoError(t, err)
	u, err := url.Parse(up.client.(*httpAnnouncer).announceURL(a, EventNone))
	require.NoError(t, err)
	assert.Equal(t, "fe80::1", strictQuery(t, u.RawQuery)["ip"])

	r, err := ParseReply([]byte("d5:peersld2:ip12:fe80::2%eth04:porti1eeee"))
	require.NoError(t, err)
	assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("[fe80::2]:1")}, r.Peers, "nor kept from an upstream")
}
