package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anacrolix/torrent/bencode"
)

// Bencoded tracker responses, both ways: what the forwarder answers its
// clients, and what it reads from upstream trackers.

// maxReplyBytes caps how much of an upstream's reply is read; a longer
// body is a failure of that upstream.
const maxReplyBytes = 1 << 20

// announceResponse is a successful announce answer (BEP 3). Peers holds a
// compact string (BEP 23) or a list of dictPeer.
type announceResponse struct {
	Interval    int64  `bencode:"interval"`
	MinInterval int64  `bencode:"min interval,omitempty"`
	Complete    int64  `bencode:"complete"`
	Incomplete  int64  `bencode:"incomplete"`
	Warning     string `bencode:"warning message,omitempty"`
	Peers       any    `bencode:"peers"`
	Peers6      string `bencode:"peers6,omitempty"` // BEP 7, compact only
}

type dictPeer struct {
	PeerID string `bencode:"peer id,omitempty"`
	IP     string `bencode:"ip"`
	Port   uint16 `bencode:"port"`
}

// failureResponse is a refusal. Interval, when set, tells the client how
// soon to come back (a rate-limited announce).
type failureResponse struct {
	Failure     string `bencode:"failure reason"`
	Interval    int64  `bencode:"interval,omitempty"`
	MinInterval int64  `bencode:"min interval,omitempty"`
}

// encodeFailure returns a bencoded failure reason.
func encodeFailure(reason string, retry time.Duration) []byte {
	return appendFailure(nil, reason, retry)
}

// appendFailure appends the bencoding of failureResponse{reason, retry in
// seconds twice} to b, byte for byte what bencode.Marshal writes, without
// its reflection and allocations (refusals are answered by the thousand
// when the forwarder is overloaded).
func appendFailure(b []byte, reason string, retry time.Duration) []byte {
	secs := int64(retry / time.Second)
	b = append(b, 'd')
	b = appendBString(b, "failure reason")
	b = appendBString(b, reason)
	if secs != 0 {
		b = appendBString(b, "interval")
		b = appendBInt(b, secs)
		b = appendBString(b, "min interval")
		b = appendBInt(b, secs)
	}
	return append(b, 'e')
}

// appendCompactAnnounce appends the bencoding of a compact (BEP 23)
// announceResponse with no warning, as encodePeers and bencode.Marshal
// would write it, to b: the dictionary's keys in sorted order, min
// interval and peers6 left out when zero and empty. It allocates nothing
// once b is large enough, which is why the announce handler uses it.
func appendCompactAnnounce(b []byte, interval, minInterval, complete, incomplete int64, peers []Peer) []byte {
	n4, n6 := 0, 0
	for _, p := range peers {
		if p.Addr.Addr().Is4() {
			n4++
		} else {
			n6++
		}
	}
	b = append(b, 'd')
	b = appendBString(b, "complete")
	b = appendBInt(b, complete)
	b = appendBString(b, "incomplete")
	b = appendBInt(b, incomplete)
	b = appendBString(b, "interval")
	b = appendBInt(b, interval)
	if minInterval != 0 {
		b = appendBString(b, "min interval")
		b = appendBInt(b, minInterval)
	}
	b = appendBString(b, "peers")
	b = appendCompactPeers(b, peers, n4, true)
	if n6 > 0 {
		b = appendBString(b, "peers6")
		b = appendCompactPeers(b, peers, n6, false)
	}
	return append(b, 'e')
}

// appendCompactPeers appends the n IPv4 (v4) or IPv6 addresses of peers
// as one bencoded compact string.
func appendCompactPeers(b []byte, peers []Peer, n int, v4 bool) []byte {
	size := 6
	if !v4 {
		size = 18
	}
	b = strconv.AppendInt(b, int64(n*size), 10)
	b = append(b, ':')
	for _, p := range peers {
		a := p.Addr.Addr()
		if a.Is4() != v4 {
			continue
		}
		if v4 {
			ip := a.As4()
			b = append(b, ip[:]...)
		} else {
			ip := a.As16()
			b = append(b, ip[:]...)
		}
		b = binary.BigEndian.AppendUint16(b, p.Addr.Port())
	}
	return b
}

func appendBString(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

func appendBInt(b []byte, n int64) []byte {
	b = append(b, 'i')
	b = strconv.AppendInt(b, n, 10)
	return append(b, 'e')
}

// Peer is a peer known for a torrent: its address and, for local clients,
// its peer id.
type Peer struct {
	Addr   netip.AddrPort
	ID     [20]byte
	HasID  bool
	Seeder bool
}

// encodePeers renders peers as the client asked: compact (IPv4 in
// "peers", IPv6 in "peers6") or a dict list.
func encodePeers(resp *announceResponse, peers []Peer, compact, noPeerID bool) {
	if !compact {
		list := make([]dictPeer, 0, len(peers))
		for _, p := range peers {
			d := dictPeer{IP: p.Addr.Addr().String(), Port: p.Addr.Port()}
			if p.HasID && !noPeerID {
				d.PeerID = string(p.ID[:])
			}
			list = append(list, d)
		}
		resp.Peers = list
		return
	}
	var v4, v6 []byte
	for _, p := range peers {
		a := p.Addr.Addr()
		if a.Is4() {
			v4 = append(v4, a.AsSlice()...)
			v4 = binary.BigEndian.AppendUint16(v4, p.Addr.Port())
		} else {
			v6 = append(v6, a.AsSlice()...)
			v6 = binary.BigEndian.AppendUint16(v6, p.Addr.Port())
		}
	}
	resp.Peers = string(v4)
	resp.Peers6 = string(v6)
}

// Reply is an upstream tracker's answer, parsed.
type Reply struct {
	Failure     string        // "failure reason"; empty on success
	Warning     string        // "warning message"
	RetryIn     time.Duration // BEP 31 "retry in", when HasRetry and not RetryNever
	HasRetry    bool
	RetryNever  bool // "retry in": "never"
	Interval    time.Duration
	MinInterval time.Duration
	Complete    int64
	Incomplete  int64
	Downloaded  int64 // completed downloads, when the tracker says (opentracker does); else 0
	Peers       []netip.AddrPort
}

// rawReply is the wire shape of a reply. Fields whose type varies between
// trackers are kept raw and decoded by hand.
type rawReply struct {
	Failure     string        `bencode:"failure reason"`
	Warning     string        `bencode:"warning message"`
	RetryIn     bencode.Bytes `bencode:"retry in"`
	Interval    int64         `bencode:"interval"`
	MinInterval int64         `bencode:"min interval"`
	Complete    int64         `bencode:"complete"`
	Incomplete  int64         `bencode:"incomplete"`
	Downloaded  int64         `bencode:"downloaded"`
	Peers       bencode.Bytes `bencode:"peers"`
	Peers6      bencode.Bytes `bencode:"peers6"`
}

// maxReplyDepth bounds how deeply lists and dictionaries may nest in an
// upstream's reply. A tracker's reply nests three deep (the reply, its
// peer list, a peer); the bencode decoder recurses once per level, so a
// hostile 1 MiB reply of nested lists took it 512 MiB of stack, and under
// -race overflowed the stack, a fatal error that no recover catches.
const maxReplyDepth = 8

// errGarbage marks a reply that is not a bencoded tracker response.
var errGarbage = errors.New("malformed tracker reply")

// ParseReply parses an upstream's bencoded announce reply. Anything that
// is not a bencoded dictionary of the expected shape is an error wrapping
// errGarbage; it never panics.
func ParseReply(body []byte) (r *Reply, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: %v", errGarbage, p)
		}
	}()
	if len(body) == 0 || body[0] != 'd' {
		return nil, fmt.Errorf("%w: not a dictionary", errGarbage)
	}
	if nestedDeeper(body, maxReplyDepth) {
		return nil, fmt.Errorf("%w: nested deeper than %d", errGarbage, maxReplyDepth)
	}
	var raw rawReply
	if err := bencode.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", errGarbage, err)
	}
	r = &Reply{
		Failure:     raw.Failure,
		Warning:     raw.Warning,
		Interval:    secs(raw.Interval),
		MinInterval: secs(raw.MinInterval),
		Complete:    max(raw.Complete, 0),
		Incomplete:  max(raw.Incomplete, 0),
		Downloaded:  max(raw.Downloaded, 0),
	}
	if len(raw.RetryIn) > 0 {
		r.HasRetry = true
		if r.RetryNever, r.RetryIn, err = parseRetryIn(raw.RetryIn); err != nil {
			return nil, err
		}
	}
	if r.Failure != "" {
		return r, nil
	}
	if r.Peers, err = decodePeers(raw.Peers, 4); err != nil {
		return nil, err
	}
	peers6, err := decodePeers(raw.Peers6, 16)
	if err != nil {
		return nil, err
	}
	r.Peers = append(r.Peers, peers6...)
	return r, nil
}

// nestedDeeper reports whether the bencoded value b opens more than max
// lists and dictionaries inside one another. It walks b without
// recursing and only counts: anything malformed is left to the decoder.
func nestedDeeper(b []byte, max int) bool {
	depth := 0
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == 'd' || c == 'l':
			if depth++; depth > max {
				return true
			}
			i++
		case c == 'e':
			depth--
			i++
		case c == 'i':
			end := bytes.IndexByte(b[i:], 'e')
			if end < 0 {
				return false
			}
			i += end + 1
		case '0' <= c && c <= '9': // a string: its length, ':', its bytes
			n := 0
			for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
				if n = n*10 + int(b[i]-'0'); n > len(b) {
					return false
				}
			}
			if i >= len(b) || b[i] != ':' {
				return false
			}
			i += 1 + n
		default:
			return false
		}
	}
	return false
}

func secs(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(min(n, 1<<31)) * time.Second
}

// parseRetryIn reads BEP 31's "retry in": an integer number of minutes,
// or the string "never". Some trackers send the minutes as a string.
func parseRetryIn(raw []byte) (never bool, d time.Duration, err error) {
	var v any
	if err := bencode.Unmarshal(raw, &v); err != nil {
		return false, 0, fmt.Errorf("%w: retry in: %v", errGarbage, err)
	}
	var mins int64
	switch t := v.(type) {
	case int64:
		mins = t
	case string:
		s := strings.TrimSpace(t)
		if strings.EqualFold(s, "never") {
			return true, 0, nil
		}
		if mins, err = strconv.ParseInt(s, 10, 64); err != nil {
			return false, 0, fmt.Errorf("%w: retry in %q", errGarbage, t)
		}
	default:
		return false, 0, fmt.Errorf("%w: retry in of type %T", errGarbage, v)
	}
	if mins < 0 {
		return false, 0, fmt.Errorf("%w: retry in %d", errGarbage, mins)
	}
	return false, time.Duration(min(mins, 1<<20)) * time.Minute, nil
}

// decodePeers reads a peers value: a compact string of (addrLen+2)-byte
// entries, or a list of dicts with "ip" and "port". Entries that do not
// hold a literal address are skipped; a malformed value is an error.
func decodePeers(raw []byte, addrLen int) ([]netip.AddrPort, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if raw[0] == 'l' {
		var list []struct {
			IP   string `bencode:"ip"`
			Port int64  `bencode:"port"`
		}
		if err := bencode.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("%w: peers: %v", errGarbage, err)
		}
		out := make([]netip.AddrPort, 0, len(list))
		for _, p := range list {
			a, err := netip.ParseAddr(p.IP)
			if err != nil || p.Port <= 0 || p.Port > 65535 {
				continue
			}
			out = append(out, netip.AddrPortFrom(a.Unmap().WithZone(""), uint16(p.Port)))
		}
		return out, nil
	}
	var s []byte
	if err := bencode.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%w: peers: %v", errGarbage, err)
	}
	return compactPeers(s, addrLen)
}

// compactPeers splits a compact peer string (BEP 23, BEP 7, BEP 15).
func compactPeers(s []byte, addrLen int) ([]netip.AddrPort, error) {
	n := addrLen + 2
	if len(s)%n != 0 {
		return nil, fmt.Errorf("%w: compact peers of %d bytes", errGarbage, len(s))
	}
	out := make([]netip.AddrPort, 0, len(s)/n)
	for b := s; len(b) > 0; b = b[n:] {
		a, _ := netip.AddrFromSlice(b[:addrLen])
		port := binary.BigEndian.Uint16(b[addrLen:n])
		if port == 0 {
			continue
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), port))
	}
	return out, nil
}

// isBencodedFailure reports whether body looks like a bencoded failure,
// for messages about non-200 replies.
func isBencodedFailure(body []byte) (string, bool) {
	if !bytes.Contains(body, []byte("failure reason")) {
		return "", false
	}
	r, err := ParseReply(body)
	if err != nil || r.Failure == "" {
		return "", false
	}
	return r.Failure, true
}

var (
	hdrTextPlain = []string{"text/plain"}
	hdrNoCache   = []string{"no-cache"}
)

// announceScratch is what one announce's answer is built in, pooled: the
// candidate peers, the set that drops duplicate addresses, the bencoded
// reply.
type announceScratch struct {
	peers []Peer
	seen  addrSet
	buf   []byte
}

var scratchPool = sync.Pool{New: func() any { return new(announceScratch) }}

// release returns sc to the pool, unless an unusually large swarm or
// reply grew it: such a one is left to the garbage collector rather than
// kept for every later announce.
func (sc *announceScratch) release() {
	if sc.reusable() {
		scratchPool.Put(sc)
	}
}

// reusable reports whether sc is of the sizes an ordinary announce grows
// it to. The set's slice holds up to 66 addresses (32 peers on loopback
// and their aliases, as every local peer is in scripts/loadbench.sh):
// with a limit of 64, every swarm of more than 16 such peers dropped its
// scratch, and the next announce built all of it again.
func (sc *announceScratch) reusable() bool {
	return cap(sc.peers) <= 4096 && cap(sc.buf) <= 64<<10 && cap(sc.seen.small) <= 128 && len(sc.seen.table) <= 4*maxPooledSet
}
