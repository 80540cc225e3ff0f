package main

import "net/netip"

// A client's address, its ip parameter and what upstreams hear.
//
// The ip parameter is believed only from a client connected over
// loopback (a proxy or a client on this host) or from a network the
// operator names (-trust-ip-from, Options.TrustIPFrom: a LAN whose clients
// or proxy may speak for others): from anyone else it would let a client
// enter any address into a swarm. No public network is trusted by default.
//
// Upstreams are told the client's address as ip= (HTTP) or the IPv4
// field (BEP 15) by forwardIP's rule. Trackers that ignore ip (or, like
// opentracker by default, take the connection's address) record the
// forwarder's address instead; for a client on the forwarder's host that
// is the right host, and the peer comes back from them under another
// loopback address (a ::1 client as 127.0.0.1, a 127.0.0.2 client as
// 127.0.0.1). The peer lists handed to clients therefore treat 127.0.0.1
// or ::1 from an upstream as a peer already listed when a local peer on
// loopback, or an earlier such upstream entry, has the same port
// (addrSet.addLocal, addrSet.addUpstream).

// trustsIP reports whether the ip parameter is believed from remote.
func trustsIP(remote netip.Addr, trusted []netip.Prefix) bool {
	if remote.IsLoopback() {
		return true
	}
	for _, p := range trusted {
		if p.Contains(remote) {
			return true
		}
	}
	return false
}

// forwardIP reports whether the client's address is sent upstream as ip.
// Any address but loopback is: the upstream sees the forwarder's
// connection, not the client's. A loopback address names the host it is
// used on, so it is sent only to an upstream on loopback too (the same
// host) and of the same family: an IPv4-only tracker may refuse an IPv6
// ip, and refusals disable an upstream.
func forwardIP(client, upstream netip.Addr) bool {
	if !client.IsValid() || client.IsUnspecified() {
		return false
	}
	if !client.IsLoopback() {
		return true
	}
	return upstream.IsLoopback() && upstream.Is4() == client.Is4()
}

// hostAddr is the address of host when it is an IP literal or
// "localhost" (read as 127.0.0.1), else the zero Addr.
func hostAddr(host string) netip.Addr {
	if host == "localhost" {
		return ipv4Loopback
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// loopbackAlias stands for "this host" in an addrSet: every loopback
// address with a port is also entered as loopbackAlias with that port.
// No peer has it: a reply's unspecified addresses are useless anyway.
var loopbackAlias = netip.IPv6Unspecified()

func aliasOf(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(loopbackAlias, a.Port()) }

// addLocal adds a local peer's address and reports whether it was new.
// Local peers are told apart by address and port, loopback or not.
func (s *addrSet) addLocal(a netip.AddrPort) bool {
	isNew := s.add(a)
	if a.Addr().IsLoopback() {
		s.add(aliasOf(a))
	}
	return isNew
}

// addUpstream adds an address an upstream returned and reports whether
// it was new. An upstream on this host records a local client it heard
// from the forwarder at the forwarder's connection address, 127.0.0.1 or
// ::1, so such an address with the port of a local peer on loopback (or
// of an earlier one of them) is that peer again, not a new one. Other
// loopback addresses (127.1.0.1) are peers of their own.
func (s *addrSet) addUpstream(a netip.AddrPort) bool {
	if isForwarderLoopback(a.Addr()) && !s.add(aliasOf(a)) {
		return false
	}
	return s.add(a)
}

var ipv4Loopback = netip.AddrFrom4([4]byte{127, 0, 0, 1})

func isForwarderLoopback(a netip.Addr) bool {
	return a == ipv4Loopback || a == netip.IPv6Loopback()
}
