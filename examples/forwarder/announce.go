package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// maxQueryLen bounds an announce's query string; longer ones are refused
// before they are parsed.
const maxQueryLen = 8 << 10

// Announce numwant bounds: what a client gets when it names none, and the
// most it may ask for.
const (
	defaultNumWant = 50
	maxNumWant     = 200
)

// Event is an announce's event parameter (BEP 3).
type Event uint8

const (
	EventNone Event = iota
	EventCompleted
	EventStarted
	EventStopped
)

func (e Event) String() string {
	switch e {
	case EventCompleted:
		return "completed"
	case EventStarted:
		return "started"
	case EventStopped:
		return "stopped"
	}
	return ""
}

// Announce is one client announce (BEP 3, BEP 23), parsed and checked. It
// is the payload of the jobs that forward it, shared by all of them, and
// never changed after parsing.
type Announce struct {
	InfoHash   [20]byte
	PeerID     [20]byte
	Addr       netip.AddrPort // the client's address: the connection's (or ip, from loopback) and port
	Uploaded   int64
	Downloaded int64
	Left       int64 // -1 when the client sent none
	Event      Event
	Compact    bool // BEP 23; true unless the client sent compact=0
	NoPeerID   bool
	NumWant    int
	Key        string // the client's key parameter, passed upstream as is

	hashHex string
	peerHex string
	bothHex string // hashHex then peerHex, in one string
}

// HashHex is the info hash in lower-case hex, the form used in job keys.
func (a *Announce) HashHex() string {
	if a.hashHex == "" { // decoded from a durable store, which keeps exported fields only
		return hex.EncodeToString(a.InfoHash[:])
	}
	return a.hashHex
}

// PeerHex is the peer id in lower-case hex.
func (a *Announce) PeerHex() string {
	if a.peerHex == "" {
		return hex.EncodeToString(a.PeerID[:])
	}
	return a.peerHex
}

// PeerKey names the peer within its torrent: the info hash and the peer
// id in lower-case hex, 80 characters.
func (a *Announce) PeerKey() string {
	if a.bothHex == "" {
		return a.HashHex() + a.PeerHex()
	}
	return a.bothHex
}

// unknownLeft is the left announced upstream for a client that sent none
// (a magnet link fetching its metadata). Trackers need one — chihaya
// refuses an announce without it, BEP 15 cannot leave it out — and 0
// would count the client as a seeder; libtorrent sends 16 KiB then.
const unknownLeft = 16 << 10

// leftUpstream is the left to announce upstream for a.
func (a *Announce) leftUpstream() int64 {
	if a.Left < 0 {
		return unknownLeft
	}
	return a.Left
}

// announceError is a client error: its text becomes the bencoded failure
// reason.
type announceError struct{ reason string }

func (e *announceError) Error() string { return e.reason }

func badRequest(format string, args ...any) error {
	return &announceError{reason: fmt.Sprintf(format, args...)}
}

// The query parameters ParseAnnounce reads; others are ignored.
const (
	pInfoHash = iota
	pPeerID
	pPort
	pUploaded
	pDownloaded
	pLeft
	pEvent
	pCompact
	pNoPeerID
	pNumWant
	pKey
	pIP
	nParams
)

var paramNames = [nParams]string{"info_hash", "peer_id", "port", "uploaded", "downloaded", "left",
	"event", "compact", "no_peer_id", "numwant", "key", "ip"}

func paramIndex(k string) int {
	for i, n := range paramNames {
		if n == k {
			return i
		}
	}
	return -1
}

// params holds the first value and the count of each known parameter.
type params struct {
	vals  [nParams]string
	count [nParams]uint8
}

func (p *params) has(i int) bool   { return p.count[i] > 0 }
func (p *params) get(i int) string { return p.vals[i] }

// parseParams splits a query as url.ParseQuery does (and rejects what it
// rejects: bad escapes, semicolons) but keeps only the known parameters,
// without allocating for values that need no unescaping.
func parseParams(raw string, p *params) error {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if strings.IndexByte(kv, ';') >= 0 {
			return errMalformed
		}
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		k, err := unescape(k)
		if err != nil {
			return err
		}
		i := paramIndex(k)
		if i == pInfoHash || i == pPeerID {
			// Kept escaped, and unescaped by exactly20 straight into
			// the Announce: no string for 20 binary bytes.
			if !validEscapes(v) {
				return errMalformed
			}
		} else if v, err = unescape(v); err != nil {
			return err
		}
		if i >= 0 {
			if p.count[i] == 0 {
				p.vals[i] = v
			}
			p.count[i] = min(p.count[i]+1, 2)
		}
	}
	return nil
}

var errMalformed = badRequest("malformed query")

func unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, nil
	}
	u, err := url.QueryUnescape(s)
	if err != nil {
		return "", errMalformed
	}
	return u, nil
}

// ParseAnnounce parses an announce query. remote is the connection's
// address, used unless remote is on loopback and the client sends a
// usable ip parameter. Every error is an *announceError whose text is fit
// for a client.
func ParseAnnounce(rawQuery string, remote netip.AddrPort) (*Announce, error) {
	return parseAnnounce(rawQuery, remote, nil)
}

// parseAnnounce is ParseAnnounce believing ip also from a remote within
// trusted.
func parseAnnounce(rawQuery string, remote netip.AddrPort, trusted []netip.Prefix) (*Announce, error) {
	if len(rawQuery) > maxQueryLen {
		return nil, badRequest("request too long")
	}
	var q params
	if err := parseParams(rawQuery, &q); err != nil {
		return nil, err
	}
	a := &Announce{NumWant: defaultNumWant, Compact: true}
	if err := exactly20(&q, pInfoHash, &a.InfoHash); err != nil {
		return nil, err
	}
	if err := exactly20(&q, pPeerID, &a.PeerID); err != nil {
		return nil, err
	}
	port, err := intParam(&q, pPort, true, 0, 65535)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		return nil, badRequest("invalid port")
	}
	// Any non-negative int64: anacrolix/torrent sends left=MaxInt64 for a
	// torrent whose size it does not know yet.
	if a.Uploaded, err = intParam(&q, pUploaded, false, 0, math.MaxInt64); err != nil {
		return nil, err
	}
	if a.Downloaded, err = intParam(&q, pDownloaded, false, 0, math.MaxInt64); err != nil {
		return nil, err
	}
	// left is required by BEP 3, but clients finishing a magnet link
	// omit it; treat a missing left as unknown (a leecher).
	if a.Left, err = intParam(&q, pLeft, false, 0, math.MaxInt64); err != nil {
		return nil, err
	}
	if !q.has(pLeft) {
		a.Left = -1
	}
	switch ev := q.get(pEvent); ev {
	case "", "empty", "paused":
	case "started":
		a.Event = EventStarted
	case "completed":
		a.Event = EventCompleted
	case "stopped":
		a.Event = EventStopped
	default:
		return nil, badRequest("invalid event")
	}
	a.Compact = q.get(pCompact) != "0"
	a.NoPeerID = q.get(pNoPeerID) == "1"
	if q.has(pNumWant) {
		n, err := intParam(&q, pNumWant, false, -1, 1<<31)
		if err != nil {
			return nil, err
		}
		if n >= 0 { // -1 is "default", as UDP trackers read it
			a.NumWant = int(min(n, maxNumWant))
		}
	}
	if k := q.get(pKey); len(k) <= 64 {
		a.Key = k
	}
	ip := remote.Addr()
	if s := q.get(pIP); s != "" && trustsIP(ip, trusted) {
		// The ip parameter is believed only from loopback (a proxy on
		// this host) and the networks the operator trusts: from anyone
		// else it would let a client enter any address into a swarm.
		// BEP 3 allows a DNS name; only literals are taken.
		if parsed, err := netip.ParseAddr(s); err == nil && !parsed.IsUnspecified() {
			ip = parsed
		}
	}
	// A zone (fe80::1%eth0) names an interface of this host: it is no
	// part of the address for peers or upstreams, and its '%' would make
	// an upstream's query malformed.
	a.Addr = netip.AddrPortFrom(ip.Unmap().WithZone(""), uint16(port))
	var both [80]byte
	hex.Encode(both[:40], a.InfoHash[:])
	hex.Encode(both[40:], a.PeerID[:])
	hexes := string(both[:])
	a.hashHex, a.peerHex, a.bothHex = hexes[:40], hexes[40:], hexes
	return a, nil
}

// exactly20 unescapes parameter i, kept escaped by parseParams (and
// checked there), into dst.
func exactly20(q *params, i int, dst *[20]byte) error {
	name := paramNames[i]
	v := q.get(i)
	n := len(v) - 2*strings.Count(v, "%")
	switch {
	case !q.has(i):
		return badRequest("missing %s", name)
	case q.count[i] > 1:
		return badRequest("more than one %s", name)
	case n != 20:
		return badRequest("invalid %s: want 20 bytes, got %d", name, n)
	}
	for j, k := 0, 0; j < len(v); k++ {
		switch c := v[j]; c {
		case '%':
			dst[k] = unhex(v[j+1])<<4 | unhex(v[j+2])
			j += 3
		case '+':
			dst[k] = ' '
			j++
		default:
			dst[k] = c
			j++
		}
	}
	return nil
}

// validEscapes reports whether url.QueryUnescape accepts s: every '%' is
// followed by two hex digits.
func validEscapes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func intParam(q *params, i int, required bool, lo, hi int64) (int64, error) {
	name := paramNames[i]
	s := q.get(i)
	if s == "" {
		if required {
			return 0, badRequest("missing %s", name)
		}
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("invalid %s", name)
	}
	return n, nil
}

// isClientError reports whether err came from ParseAnnounce.
func isClientError(err error) bool {
	var ae *announceError
	return errors.As(err, &ae)
}
