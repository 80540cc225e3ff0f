package main

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An IPv6 tracker that answers the numwant we ask for (200) sends 18-byte
// peers (BEP 15): 3620 bytes, which must not be cut to the read buffer
// and then refused as malformed.
func TestUDPAnnounceReadsAFullIPv6Reply(t *testing.T) {
	pc, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer pc.Close()
	var want []netip.AddrPort
	for i := range maxNumWant {
		want = append(want, netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)}), uint16(6881+i)))
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			req := buf[:n]
			if n < 16 {
				continue
			}
			out := binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(req[8:12]))
			out = append(out, req[12:16]...)
			if binary.BigEndian.Uint32(req[8:12]) == udpActionConnect {
				out = binary.BigEndian.AppendUint64(out, 42)
			} else {
				out = binary.BigEndian.AppendUint32(out, 1800) // interval
				out = binary.BigEndian.AppendUint32(out, 0)    // leechers
				out = binary.BigEndian.AppendUint32(out, uint32(len(want)))
				for _, p := range want {
					out = append(out, p.Addr().AsSlice()...)
					out = binary.BigEndian.AppendUint16(out, p.Port())
				}
			}
			pc.WriteTo(out, from)
		}
	}()
	a, err := ParseAnnounce(query(nil), remote)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u := &udpAnnouncer{addr: pc.LocalAddr().String()}
	r, err := u.announce(ctx, a, EventNone)
	require.NoError(t, err)
	assert.Equal(t, want, r.Peers)
	assert.Equal(t, int64(len(want)), r.Complete)
}
