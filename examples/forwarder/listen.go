package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// listFlag is a flag.Value holding a list of addresses: each use of the
// flag adds one or more, comma-separated. The first use replaces the
// default list (or the one from the environment).
type listFlag struct {
	vals  []string
	given bool // set once the flag was used: later uses append
}

func (l *listFlag) String() string { return strings.Join(l.vals, ",") }

// Set adds the comma-separated addresses in v.
func (l *listFlag) Set(v string) error {
	if !l.given {
		l.vals, l.given = nil, true
	}
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%q: %v", a, err)
		}
		l.vals = append(l.vals, a)
	}
	if len(l.vals) == 0 {
		return errors.New("no address")
	}
	return nil
}

// listenAll opens a TCP listener on each address, or none: when one
// fails, those already open are closed. One forwarder serves IPv4 and
// IPv6 clients by listening on an address of each (127.0.0.1:6969 and
// [::1]:6969); with a dual-stack wildcard such as :6969 one is enough.
//
// Accepted connections get no TCP keep-alive probes: a tracker's clients
// announce on a connection of their own or keep one briefly, the servers
// close a connection idle for longer than announceIdleTimeout, and
// switching the probes on cost four setsockopt calls per connection
// (2.3 % of the forwarder's CPU at a connection per announce). On Linux
// the listeners defer each accept until the client has sent its request
// (deferAccept), so serving a connection begins with a read that finds
// it instead of a wait for it.
func listenAll(addrs []string) ([]net.Listener, error) {
	var lns []net.Listener
	lc := net.ListenConfig{KeepAlive: -1, Control: deferAccept}
	for _, a := range addrs {
		ln, err := lc.Listen(context.Background(), "tcp", a)
		if err != nil {
			closeAll(lns)
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// prefixList is a flag.Value holding networks, comma-separated; each use
// of the flag adds to the list.
type prefixList []netip.Prefix

func (p *prefixList) String() string {
	var b strings.Builder
	for i, x := range *p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x.String())
	}
	return b.String()
}

// Set adds the comma-separated networks in v (CIDRs, or single addresses).
func (p *prefixList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return err
			}
			*p = append(*p, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		pr, err := netip.ParsePrefix(s)
		if err != nil {
			return err
		}
		*p = append(*p, pr.Masked())
	}
	return nil
}
