package main

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anacrolix/torrent/bencode"
)

// Simulated upstream trackers, for the demo and the tests. Each answers
// in one fixed way, so that every path through the forwarder's job
// handler can be seen.

// Behaviours of a simulated upstream.
const (
	simFast    = "fast"     // answers at once with peers
	simSlow    = "slow"     // answers after a delay
	sim429     = "429"      // always HTTP 429 Too Many Requests
	sim404     = "404"      // always HTTP 404 Not Found
	simRetryIn = "retry-in" // failure reason with BEP 31 "retry in" (minutes)
	simNever   = "never"    // failure reason with "retry in": "never"
	simReject  = "reject"   // failure reason without "retry in"
	simFlaky   = "flaky"    // 5xx, garbage and success at random
	simGarbage = "garbage"  // a body that is not bencode
	simHuge    = "huge"     // an endless body
	sim500     = "500"      // always HTTP 500
	simEcho    = "echo"     // a real swarm: lists the peers announced to it
)

// simTracker is one simulated HTTP upstream.
type simTracker struct {
	Kind     string
	Delay    time.Duration // for slow: each answer waits Delay..2*Delay
	Interval int64         // seconds, in successful replies
	RetryIn  atomic.Int64  // minutes, for retry-in; tests change it while serving
	FailRate float64       // for flaky: share of failed answers
	// KeepStopped, for echo: a stopped peer stays listed, as at a tracker
	// the stop has not reached yet.
	KeepStopped bool

	hits atomic.Int64
	mu   sync.Mutex
	seen map[string][]string // "infohash-hex:peerid-hex" → events, in order
	// for echo: each torrent's peers, by peer id
	swarm map[[20]byte]map[[20]byte]netip.AddrPort
}

func newSimTracker(kind string) *simTracker {
	s := &simTracker{Kind: kind, Delay: 300 * time.Millisecond, Interval: 60, FailRate: 0.5}
	s.RetryIn.Store(1)
	return s
}

// Hits is how many announces reached the tracker.
func (s *simTracker) Hits() int64 { return s.hits.Load() }

// Events returns the events the tracker saw for one peer of one torrent
// ("" for a regular announce).
func (s *simTracker) Events(hashHex, peerHex string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen[hashHex+":"+peerHex]...)
}

func (s *simTracker) record(r *http.Request, remote netip.AddrPort) (*Announce, bool) {
	a, err := ParseAnnounce(r.URL.RawQuery, remote)
	if err != nil {
		return nil, false
	}
	s.mu.Lock()
	if s.seen == nil {
		s.seen = make(map[string][]string)
	}
	k := a.HashHex() + ":" + a.PeerHex()
	if len(s.seen) < 100000 {
		s.seen[k] = append(s.seen[k], a.Event.String())
	}
	s.mu.Unlock()
	return a, true
}

func (s *simTracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.hits.Add(1)
	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	a, ok := s.record(r, remote)
	if !ok {
		w.Write(encodeFailure("bad announce", 0))
		return
	}
	switch s.Kind {
	case sim429:
		w.WriteHeader(http.StatusTooManyRequests)
		return
	case sim404:
		http.NotFound(w, r)
		return
	case sim500:
		w.WriteHeader(http.StatusInternalServerError)
		return
	case simRetryIn:
		w.Write(bencode.MustMarshal(map[string]any{"failure reason": "tracker busy", "retry in": s.RetryIn.Load()}))
		return
	case simNever:
		w.Write(bencode.MustMarshal(map[string]any{"failure reason": "go away", "retry in": "never"}))
		return
	case simReject:
		w.Write(encodeFailure("unregistered torrent", 0))
		return
	case simGarbage:
		w.Write([]byte("<html>this is not a tracker</html>"))
		return
	case simHuge:
		w.Write([]byte("d5:peers"))
		chunk := []byte(strings.Repeat("9", 32<<10))
		for i := 0; i < 1024 && r.Context().Err() == nil; i++ { // 32 MiB at most
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		return
	case simSlow:
		d := s.Delay + rand.N(s.Delay+1)
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	case simEcho:
		w.Write(s.echo(a))
		return
	case simFlaky:
		if rand.Float64() < s.FailRate {
			if rand.IntN(4) == 0 {
				w.Write([]byte("d8:intervali"))
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
	}
	w.Write(s.reply(a))
}

// reply is a successful answer with a handful of synthetic peers derived
// from the info hash, on loopback addresses; a stop's answer lists none,
// as opentracker's does.
func (s *simTracker) reply(a *Announce) []byte {
	var peers []byte
	n := 3 + int(a.InfoHash[1]%5)
	for i := range n {
		if a.Event == EventStopped {
			break
		}
		peers = append(peers, 127, 1, a.InfoHash[2], byte(i+1))
		peers = binary.BigEndian.AppendUint16(peers, 6881+uint16(i))
	}
	return bencode.MustMarshal(map[string]any{
		"interval":   s.Interval,
		"complete":   n / 2,
		"incomplete": n - n/2,
		"downloaded": n + 10,
		"peers":      string(peers),
	})
}

// echo records a's peer in its torrent's swarm (or drops it on stop,
// unless KeepStopped) and answers with the swarm's other peers, as a real
// tracker does; a stop's answer lists none, as opentracker's does.
func (s *simTracker) echo(a *Announce) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.swarm == nil {
		s.swarm = make(map[[20]byte]map[[20]byte]netip.AddrPort)
	}
	sw := s.swarm[a.InfoHash]
	if sw == nil {
		sw = make(map[[20]byte]netip.AddrPort)
		s.swarm[a.InfoHash] = sw
	}
	var peers []byte
	if a.Event == EventStopped && !s.KeepStopped {
		delete(sw, a.PeerID)
	} else {
		sw[a.PeerID] = a.Addr
	}
	for id, addr := range sw {
		if id != a.PeerID && a.Event != EventStopped && addr.Addr().Is4() {
			ip := addr.Addr().As4()
			peers = binary.BigEndian.AppendUint16(append(peers, ip[:]...), addr.Port())
		}
	}
	return bencode.MustMarshal(map[string]any{"interval": s.Interval, "complete": 0, "incomplete": len(sw), "peers": string(peers)})
}

// simServer serves a simTracker on 127.0.0.1 at a free port.
type simServer struct {
	*simTracker
	URL string
	srv *http.Server
	ln  net.Listener
}

func startSimServer(t *simTracker) (*simServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &simServer{simTracker: t, ln: ln, URL: "http://" + ln.Addr().String() + "/announce",
		srv: &http.Server{Handler: t, ReadHeaderTimeout: 5 * time.Second}}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *simServer) Close() { s.srv.Close() }

// simUDPTracker is a BEP 15 tracker on 127.0.0.1, answering every
// announce with fixed peers, or with an error when Fail is set.
type simUDPTracker struct {
	Addr string
	Fail string // when set, announces get this error (action 3)
	hits atomic.Int64
	pc   net.PacketConn
	last atomic.Uint32 // last announce's event
}

func startSimUDP() (*simUDPTracker, error) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &simUDPTracker{pc: pc, Addr: pc.LocalAddr().String()}
	go s.serve()
	return s, nil
}

func (s *simUDPTracker) Hits() int64 { return s.hits.Load() }
func (s *simUDPTracker) Close()      { s.pc.Close() }

func (s *simUDPTracker) serve() {
	buf := make([]byte, 2048)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if out := s.answer(buf[:n]); out != nil {
			s.pc.WriteTo(out, from)
		}
	}
}

func (s *simUDPTracker) answer(req []byte) []byte {
	if len(req) < 16 {
		return nil
	}
	action, tx := binary.BigEndian.Uint32(req[8:12]), req[12:16]
	out := make([]byte, 0, 64)
	switch {
	case action == udpActionConnect && binary.BigEndian.Uint64(req[0:8]) == udpProtocolID:
		out = binary.BigEndian.AppendUint32(out, udpActionConnect)
		out = append(out, tx...)
		out = binary.BigEndian.AppendUint64(out, 0x1234_5678_9abc_def0)
	case action == udpActionAnnounce && len(req) >= 98:
		s.hits.Add(1)
		s.last.Store(binary.BigEndian.Uint32(req[80:84]))
		if binary.BigEndian.Uint64(req[0:8]) != 0x1234_5678_9abc_def0 {
			return udpError(tx, "bad connection id")
		}
		if s.Fail != "" {
			return udpError(tx, s.Fail)
		}
		out = binary.BigEndian.AppendUint32(out, udpActionAnnounce)
		out = append(out, tx...)
		out = binary.BigEndian.AppendUint32(out, 120) // interval
		out = binary.BigEndian.AppendUint32(out, 1)   // leechers
		out = binary.BigEndian.AppendUint32(out, 2)   // seeders
		if binary.BigEndian.Uint32(req[80:84]) == 3 { // stopped: no peers, as opentracker answers
			return out
		}
		out = append(out, 127, 2, 0, 1, 0x1a, 0xe1) // 127.2.0.1:6881
		out = append(out, 127, 2, 0, 2, 0x1a, 0xe2)
	}
	return out
}

func udpError(tx []byte, msg string) []byte {
	out := binary.BigEndian.AppendUint32(nil, udpActionError)
	out = append(out, tx...)
	return append(out, msg...)
}
