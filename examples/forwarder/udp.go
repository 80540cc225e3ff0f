package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"sync"
	"time"

	"github.com/queuekit/queue"
)

// BEP 15: the UDP tracker protocol, client side.

const (
	udpProtocolID     = 0x41727101980
	udpActionConnect  = 0
	udpActionAnnounce = 1
	udpActionError    = 3
)

// udpFirstWait is how long the first request waits for an answer before
// it is sent again; each later wait doubles, within the job's deadline.
// BEP 15 says 15 s; a forwarder with a job timeout of a few seconds cannot
// wait that long, and a lost datagram on a healthy path is rare.
var udpFirstWait = 500 * time.Millisecond

// udpMaxDatagram is the most a UDP datagram can carry. Replies are read
// into buffers this large because a datagram longer than the buffer is cut
// short without an error: a tracker answering the 200 peers asked for over
// IPv6 sends 3620 bytes.
const udpMaxDatagram = 64 << 10

var udpBufs = sync.Pool{New: func() any { return new([udpMaxDatagram]byte) }}

// udpAnnouncer announces to a UDP tracker. Each announce uses its own
// socket and connection id: a connection id is bound to the client's
// address, so one socket per job keeps concurrent jobs apart at the cost of
// one extra round trip.
type udpAnnouncer struct {
	addr string // host:port
}

func (u *udpAnnouncer) announce(ctx context.Context, a *Announce, ev Event) (*Reply, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", u.addr)
	if err != nil {
		return nil, queue.ClassifyHTTP(0, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	bp := udpBufs.Get().(*[udpMaxDatagram]byte)
	defer udpBufs.Put(bp)
	buf := bp[:]
	connReq := binary.BigEndian.AppendUint64(make([]byte, 0, 16), udpProtocolID)
	connReq = binary.BigEndian.AppendUint32(connReq, udpActionConnect)
	connReq = binary.BigEndian.AppendUint32(connReq, 0) // transaction id, set by udpExchange
	resp, err := udpExchange(ctx, conn, connReq, buf)
	if err != nil {
		return udpFailure(err)
	}
	if len(resp) < 16 {
		return nil, fmt.Errorf("%w: short connect reply", errGarbage)
	}
	connID := binary.BigEndian.Uint64(resp[8:16])

	resp, err = udpExchange(ctx, conn, udpAnnounceRequest(connID, a, ev, conn.RemoteAddr()), buf)
	if err != nil {
		return udpFailure(err)
	}
	if len(resp) < 20 {
		return nil, fmt.Errorf("%w: short announce reply", errGarbage)
	}
	addrLen := 4
	if ra, ok := conn.RemoteAddr().(*net.UDPAddr); ok && ra.IP.To4() == nil {
		addrLen = 16
	}
	peers, err := compactPeers(resp[20:], addrLen)
	if err != nil {
		return nil, err
	}
	return &Reply{
		Interval:   secs(int64(binary.BigEndian.Uint32(resp[8:12]))),
		Incomplete: int64(binary.BigEndian.Uint32(resp[12:16])),
		Complete:   int64(binary.BigEndian.Uint32(resp[16:20])),
		Peers:      peers,
	}, nil
}

// udpFailure turns a tracker's error reply into a Reply with its failure
// reason and passes other errors on.
func udpFailure(err error) (*Reply, error) {
	var te *udpTrackerError
	if errors.As(err, &te) {
		return &Reply{Failure: te.msg}, nil
	}
	return nil, err
}

// udpAnnounceRequest builds the 98-byte announce request.
func udpAnnounceRequest(connID uint64, a *Announce, ev Event, remote net.Addr) []byte {
	b := make([]byte, 0, 98)
	b = binary.BigEndian.AppendUint64(b, connID)
	b = binary.BigEndian.AppendUint32(b, udpActionAnnounce)
	b = binary.BigEndian.AppendUint32(b, 0) // transaction id, set by udpExchange
	b = append(b, a.InfoHash[:]...)
	b = append(b, a.PeerID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(a.Downloaded))
	b = binary.BigEndian.AppendUint64(b, uint64(a.leftUpstream()))
	b = binary.BigEndian.AppendUint64(b, uint64(a.Uploaded))
	b = binary.BigEndian.AppendUint32(b, udpEvent(ev))
	// The client's IPv4 address by forwardIP's rule (BEP 15 has room for
	// IPv4 only); 0 lets the tracker use the packet's source.
	var ip uint32
	if ca := a.Addr.Addr(); ca.Is4() {
		if ra, ok := remote.(*net.UDPAddr); ok && ra.IP.To4() != nil && forwardIP(ca, ra.AddrPort().Addr().Unmap()) {
			ip = binary.BigEndian.Uint32(ca.AsSlice())
		}
	}
	b = binary.BigEndian.AppendUint32(b, ip)
	h := fnv.New32a()
	h.Write([]byte(a.Key))
	h.Write(a.PeerID[:])
	b = binary.BigEndian.AppendUint32(b, h.Sum32())
	b = binary.BigEndian.AppendUint32(b, uint32(maxNumWant))
	b = binary.BigEndian.AppendUint16(b, a.Addr.Port())
	return b
}

func udpEvent(ev Event) uint32 {
	switch ev {
	case EventCompleted:
		return 1
	case EventStarted:
		return 2
	case EventStopped:
		return 3
	}
	return 0
}

// udpExchange sends req (whose bytes 12..16 get a fresh transaction id),
// resending with doubling waits until a reply with the same action and
// transaction id arrives or ctx ends. A tracker error (action 3) is a
// *udpTrackerError; no reply at all is a plain, retryable error.
func udpExchange(ctx context.Context, conn net.Conn, req, buf []byte) ([]byte, error) {
	var tx [4]byte
	if _, err := rand.Read(tx[:]); err != nil {
		return nil, err
	}
	// The connect request has its action at 8..12 and transaction at
	// 12..16, as does announce; both layouts agree.
	copy(req[12:16], tx[:])
	action := binary.BigEndian.Uint32(req[8:12])
	wait := udpFirstWait
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("udp tracker: %w: %v", errNoReply, err)
		}
		if _, err := conn.Write(req); err != nil {
			return nil, queue.ClassifyHTTP(0, err)
		}
		deadline := time.Now().Add(wait)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		conn.SetReadDeadline(deadline)
		if ctx.Err() != nil {
			conn.SetReadDeadline(time.Now())
		}
		for {
			n, err := conn.Read(buf)
			if err != nil {
				if isTimeout(err) {
					break // resend
				}
				return nil, queue.ClassifyHTTP(0, err)
			}
			r := buf[:n]
			if n < 8 || [4]byte(r[4:8]) != tx {
				continue // not ours: a late reply to an earlier send
			}
			switch got := binary.BigEndian.Uint32(r[0:4]); {
			case got == udpActionError:
				return nil, &udpTrackerError{msg: string(r[8:])}
			case got != action:
				return nil, fmt.Errorf("%w: action %d, want %d", errGarbage, got, action)
			}
			return r, nil
		}
		wait *= 2
	}
}

// udpTrackerError is a tracker's error reply (action 3); announce turns
// it into a Reply with a failure reason, as an HTTP tracker would send.
type udpTrackerError struct{ msg string }

func (e *udpTrackerError) Error() string { return "udp tracker error: " + e.msg }
