package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue"
)

// Upstream is one tracker the forwarder announces to. Its Name is the
// queue's Target, so the queue keeps its health (suspended, disabled) and
// its next-due times per torrent.
type Upstream struct {
	Name string
	URL  *url.URL
	// Kind is a free label shown in the demo's summary ("fast", "429", ...).
	Kind string

	client announcer
	stats  upstreamStats
}

// upstreamStats counts what the upstream answered, for the demo's summary.
type upstreamStats struct {
	ok, failed, retryIn, overloaded, rejected atomic.Int64
}

// announcer sends one announce to one upstream.
type announcer interface {
	announce(ctx context.Context, a *Announce, ev Event) (*Reply, error)
}

// ParseUpstream parses an upstream spec: "URL" or "NAME=URL", where URL is
// http(s)://host[:port]/path or udp://host:port. Without a NAME the
// upstream is named host:port.
func ParseUpstream(spec string, client *http.Client) (*Upstream, error) {
	name, raw, ok := strings.Cut(spec, "=")
	if !ok || strings.Contains(name, "/") {
		name, raw = "", spec
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %v", spec, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("upstream %q: no host", spec)
	}
	if name == "" {
		name = u.Host
	}
	up := &Upstream{Name: name, URL: u}
	switch u.Scheme {
	case "http", "https":
		h := &httpAnnouncer{base: u, client: client, host: hostAddr(u.Hostname())}
		h.prefix = h.urlPrefix()
		up.client = h
	case "udp":
		if u.Port() == "" {
			return nil, fmt.Errorf("upstream %q: udp needs a port", spec)
		}
		up.client = &udpAnnouncer{addr: u.Host}
	default:
		return nil, fmt.Errorf("upstream %q: scheme must be http, https or udp", spec)
	}
	return up, nil
}

// newHTTPClient returns the client used for every HTTP upstream. timeout
// bounds each request, body included.
func newHTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.ResponseHeaderTimeout = timeout
	return &http.Client{
		Timeout:   timeout,
		Transport: tr,
		// A tracker that redirects is answered as it asks, but not forever.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 3 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
}

// httpAnnouncer announces over HTTP (BEP 3).
type httpAnnouncer struct {
	base   *url.URL
	client *http.Client
	host   netip.Addr // the upstream's address when its URL names one (see forwardIP)
	prefix string     // urlPrefix, computed once
}

func (h *httpAnnouncer) announce(ctx context.Context, a *Announce, ev Event) (*Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.announceURL(a, ev), nil)
	if err != nil {
		return nil, queue.Permanent(err)
	}
	req.Header.Set("User-Agent", "queuekit-forwarder/1")
	resp, err := h.client.Do(req)
	if err != nil {
		// Keep the request's URL (a passkey, the client's ids) out of
		// errors, which reach logs and /stats.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s %s: %w", ue.Op, h.base.Host, ue.Err)
		}
		return nil, queue.ClassifyHTTP(0, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes+1))
	if resp.StatusCode != http.StatusOK {
		if c := queue.ClassifyHTTP(resp.StatusCode, nil); c != nil {
			if reason, ok := isBencodedFailure(body); ok {
				c = fmt.Errorf("%w: %s", c, reason)
			}
			return nil, c
		}
		// Some other 2xx: read it as a reply below.
	}
	if err != nil {
		return nil, fmt.Errorf("reading reply: %w", err)
	}
	if len(body) > maxReplyBytes {
		return nil, fmt.Errorf("reply longer than %d bytes", maxReplyBytes)
	}
	return ParseReply(body)
}

// announceURL builds the upstream request: the client's parameters, with
// the forwarder asking for compact peers.
func (h *httpAnnouncer) announceURL(a *Announce, ev Event) string {
	prefix := h.prefix
	if prefix == "" {
		prefix = h.urlPrefix()
	}
	var b strings.Builder
	b.Grow(len(prefix) + 256)
	b.WriteString(prefix)
	b.WriteString("info_hash=")
	escapeQuery(&b, a.InfoHash[:])
	b.WriteString("&peer_id=")
	escapeQuery(&b, a.PeerID[:])
	var num [20]byte // the numbers, formatted without a string each
	b.WriteString("&port=")
	b.Write(strconv.AppendUint(num[:0], uint64(a.Addr.Port()), 10))
	b.WriteString("&uploaded=")
	b.Write(strconv.AppendInt(num[:0], a.Uploaded, 10))
	b.WriteString("&downloaded=")
	b.Write(strconv.AppendInt(num[:0], a.Downloaded, 10))
	b.WriteString("&left=")
	b.Write(strconv.AppendInt(num[:0], a.leftUpstream(), 10))
	b.WriteString("&compact=1&numwant=")
	b.Write(strconv.AppendInt(num[:0], maxNumWant, 10))
	if ev != EventNone {
		b.WriteString("&event=")
		b.WriteString(ev.String())
	}
	if a.Key != "" {
		b.WriteString("&key=")
		escapeQuery(&b, a.Key)
	}
	if ip := a.Addr.Addr(); forwardIP(ip, h.host) {
		b.WriteString("&ip=")
		var ipb [64]byte
		b.Write(ip.AppendTo(ipb[:0]))
	}
	return b.String()
}

// urlPrefix is the upstream's URL up to where announceURL appends the
// client's parameters: the URL without its query, '?', and its query and
// '&' if it has one (a passkey).
func (h *httpAnnouncer) urlPrefix() string {
	u := *h.base
	u.RawQuery = ""
	if h.base.RawQuery != "" {
		return u.String() + "?" + h.base.RawQuery + "&"
	}
	return u.String() + "?"
}

// escapeQuery writes s to b percent-encoded for a tracker's query string:
// every byte but RFC 3986's unreserved characters as %XX, as BitTorrent
// clients send a binary info_hash and peer_id. Not url.QueryEscape: its
// '+' for a space byte is form encoding, which opentracker and other
// trackers read as a literal '+', so an info hash holding byte 0x20 (one
// in twelve) would name another torrent there.
func escapeQuery[S ~string | ~[]byte](b *strings.Builder, s S) {
	const hexDigits = "0123456789ABCDEF"
	for i := range len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
}

// errNoReply marks a UDP tracker that never answered.
var errNoReply = errors.New("no reply")

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
