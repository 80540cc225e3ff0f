package durable

import (
	"errors"
	"net"
)

// BadAddress reports whether err, from connecting to a store's server,
// says that its address cannot work however long one waits: a host name
// that does not resolve (DNS "no such host") or a port that is not one.
// Connection refused, timeouts and a DNS server that does not answer are
// outages instead: they may pass.
func BadAddress(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsNotFound
	}
	var addrErr *net.AddrError
	return errors.As(err, &addrErr)
}
