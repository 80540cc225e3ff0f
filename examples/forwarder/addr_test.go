package main

import (
	"bytes"
	"net"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// upstreamIP is the ip parameter a's announce carries to upstream URL
// ("" for none).
func upstreamIP(t *testing.T, a *Announce, upstream string) string {
	t.Helper()
	up, err := ParseUpstream(upstream, nil)
	require.NoError(t, err)
	u, err := url.Parse(up.client.(*httpAnnouncer).announceURL(a, EventNone))
	require.NoError(t, err)
	return strictQuery(t, u.RawQuery)["ip"]
}

// A client on loopback that names its address (ip=127.0.0.2) keeps it
// upstream when the upstream can reach it there; before, no ip was sent
// for any loopback client and the upstream recorded 127.0.0.1.
func TestLoopbackClientAddressReachesUpstreams(t *testing.T) {
	lo := netip.MustParseAddrPort("127.0.0.1:5000")
	a, err := ParseAnnounce(query(map[string]string{"ip": "127.0.0.2"}), lo)
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddrPort("127.0.0.2:6881"), a.Addr, "ip is believed from loopback")
	assert.Equal(t, "127.0.0.2", upstreamIP(t, a, "http://127.0.0.1:9/announce"))
	assert.Equal(t, "127.0.0.2", upstreamIP(t, a, "http://localhost:9/announce"))
	assert.Equal(t, "", upstreamIP(t, a, "http://tracker.example/announce"), "meaningless off this host")
	assert.Equal(t, "", upstreamIP(t, a, "http://[::1]:9/announce"), "not an IPv6 tracker's family")

	six, err := ParseAnnounce(query(nil), netip.MustParseAddrPort("[::1]:5000"))
	require.NoError(t, err)
	assert.Equal(t, "::1", upstreamIP(t, six, "http://[::1]:9/announce"))
	assert.Equal(t, "", upstreamIP(t, six, "http://127.0.0.1:9/announce"), "an IPv4 tracker may refuse an IPv6 ip")

	public, err := ParseAnnounce(query(map[string]string{"ip": "127.0.0.2"}), remote)
	require.NoError(t, err)
	assert.Equal(t, remote.Addr(), public.Addr.Addr(), "ip is not believed from a public remote")
	for _, u := range []string{"http://127.0.0.1:9/announce", "http://tracker.example/announce"} {
		assert.Equal(t, remote.Addr().String(), upstreamIP(t, public, u), u)
	}

	// BEP 15's IPv4 field follows the same rule.
	udpIP := func(a *Announce, to string) netip.Addr {
		req := udpAnnounceRequest(1, a, EventNone, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(to)))
		return netip.AddrFrom4([4]byte(req[84:88]))
	}
	assert.Equal(t, netip.MustParseAddr("127.0.0.2"), udpIP(a, "127.0.0.1:9"))
	assert.Equal(t, netip.IPv4Unspecified(), udpIP(a, "203.0.113.1:9"))
	assert.Equal(t, remote.Addr(), udpIP(public, "203.0.113.1:9"))
}

// A local peer on loopback is handed out once, not also as the copy an
// upstream on this host returns at the forwarder's own address.
func TestLoopbackPeerIsListedOnce(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	six := peerAnnounce(1, 10, EventStarted)
	six.Addr = netip.MustParseAddrPort("[::1]:7001")
	two := peerAnnounce(2, 10, EventStarted)
	two.Addr = netip.MustParseAddrPort("127.0.0.2:7002")
	asker := peerAnnounce(3, 10, EventStarted)
	for _, a := range []*Announce{six, two, asker} {
		s.update(a, t0)
	}
	s.recordReply(six, "up", &Reply{Peers: []netip.AddrPort{
		netip.MustParseAddrPort("127.0.0.1:7001"), // six, as the upstream recorded it
		netip.MustParseAddrPort("127.0.0.1:7002"), // two, likewise
		netip.MustParseAddrPort("[::1]:7002"),     // two again, from an IPv6 upstream
		netip.MustParseAddrPort("127.0.0.1:7003"), // a peer of its own
		netip.MustParseAddrPort("127.1.0.1:7001"), // a peer of its own on another loopback address
	}}, t0, time.Hour)

	got, _, _ := s.peers(asker, 50, t0)
	assert.ElementsMatch(t, []netip.AddrPort{
		six.Addr, two.Addr,
		netip.MustParseAddrPort("127.0.0.1:7003"), netip.MustParseAddrPort("127.1.0.1:7001"),
	}, addrs(got))

	got, _, _ = s.peers(six, 50, t0)
	assert.NotContains(t, addrs(got), netip.MustParseAddrPort("127.0.0.1:7001"), "nor is a client handed itself")
	assert.Len(t, got, 4)
}

// ip is believed from loopback always, from the networks -trust-ip-from
// names, and from nowhere else.
func TestTrustIPFrom(t *testing.T) {
	_, s, err := parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce",
		"-trust-ip-from", "10.0.0.0/8, 192.0.2.7", "-trust-ip-from", "fd00::/8"}, &bytes.Buffer{})
	require.NoError(t, err)
	trusted := []netip.Prefix(s.trustIP)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("fd00::/8")}, trusted)
	_, _, err = parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce", "-trust-ip-from", "10.0.0.0/99"}, &bytes.Buffer{})
	assert.Error(t, err)

	for _, tc := range []struct {
		from    string
		trusted []netip.Prefix
		want    string
	}{
		{"127.0.0.1:1", nil, "10.9.9.9"},
		{"10.1.2.3:1", nil, "10.1.2.3"},
		{"10.1.2.3:1", trusted, "10.9.9.9"},
		{"192.0.2.7:1", trusted, "10.9.9.9"},
		{"192.0.2.8:1", trusted, "192.0.2.8"},
		{"198.51.100.1:1", trusted, "198.51.100.1"},
	} {
		a, err := parseAnnounce(query(map[string]string{"ip": "10.9.9.9"}), netip.MustParseAddrPort(tc.from), tc.trusted)
		require.NoError(t, err)
		assert.Equal(t, tc.want, a.Addr.Addr().String(), "from %s", tc.from)
	}
}
