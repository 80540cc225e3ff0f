package main

import (
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/queuekit/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func hashN(n byte) [20]byte {
	var h [20]byte
	h[0], h[19] = 0xab, n
	return h
}

func scrapeQuery(hs ...[20]byte) string {
	v := url.Values{}
	for _, h := range hs {
		v.Add("info_hash", string(h[:]))
	}
	return v.Encode()
}

func TestParseScrape(t *testing.T) {
	a, b := hashN(1), hashN(2)
	got, err := parseScrape(scrapeQuery(a))
	require.NoError(t, err)
	assert.Equal(t, [][20]byte{a}, got)

	got, err = parseScrape(scrapeQuery(a, b, a) + "&peer_id=x&key")
	require.NoError(t, err)
	assert.Equal(t, [][20]byte{a, b}, got, "several, in order, each once; other parameters ignored")

	many := make([][20]byte, maxScrapeHashes)
	for i := range many {
		many[i] = hashN(byte(i))
	}
	_, err = parseScrape(scrapeQuery(many...))
	require.NoError(t, err, "%d hashes are fine", maxScrapeHashes)

	for name, tc := range map[string]struct{ query, reason string }{
		"none":       {"", "missing info_hash"},
		"other only": {"peer_id=abc", "missing info_hash"},
		"short":      {"info_hash=" + strings.Repeat("a", 19), "invalid info_hash: want 20 bytes, got 19"},
		"long":       {scrapeQuery(a) + "&info_hash=" + strings.Repeat("a", 40), "invalid info_hash: want 20 bytes, got 40"},
		"too many":   {scrapeQuery(append(many, hashN(200))...), "too many info_hash: at most 64"},
		"bad escape": {"info_hash=%zz", "malformed query"},
		"semicolon":  {scrapeQuery(a) + ";x", "malformed query"},
		"too long":   {strings.Repeat("x", maxQueryLen+1), "request too long"},
	} {
		_, err := parseScrape(tc.query)
		require.Error(t, err, name)
		assert.True(t, isClientError(err), name)
		assert.Contains(t, err.Error(), tc.reason, name)
	}
}

// The counts are the largest of the forwarder's own and each live
// upstream reply's, field by field, never their sum.
func TestSwarmScrapeTakesTheLargestCount(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	now := time.Unix(1_000_000, 0)
	h := peerAnnounce(1, 0, EventCompleted).InfoHash
	assert.Equal(t, scrapeFile{}, s.scrape(h, now), "an unknown torrent")

	s.update(peerAnnounce(1, 0, EventCompleted), now) // a seeder that completed here
	s.update(peerAnnounce(2, 0, EventNone), now)      // a seeder
	s.update(peerAnnounce(3, 50, EventStarted), now)  // a leecher
	s.update(peerAnnounce(1, 0, EventCompleted), now) // completed counts once per peer
	assert.Equal(t, scrapeFile{Complete: 2, Downloaded: 1, Incomplete: 1}, s.scrape(h, now), "local peers only")

	a := peerAnnounce(1, 0, EventNone)
	s.recordReply(a, "big", &Reply{Complete: 10, Incomplete: 0, Downloaded: 40}, now, time.Minute)
	s.recordReply(a, "small", &Reply{Complete: 1, Incomplete: 7, Downloaded: 3}, now, 2*time.Minute)
	assert.Equal(t, scrapeFile{Complete: 10, Downloaded: 40, Incomplete: 7}, s.scrape(h, now))

	later := now.Add(90 * time.Second) // "big" expired
	assert.Equal(t, scrapeFile{Complete: 2, Downloaded: 3, Incomplete: 7}, s.scrape(h, later))
	later = now.Add(2 * time.Hour) // local peers silent past their TTL too
	assert.Equal(t, scrapeFile{Complete: 0, Downloaded: 1, Incomplete: 0}, s.scrape(h, later))
}

// A stopped peer is counted neither by scrape nor in an announce's
// reply, though its record stays for the TTL (so that upstreams' lists
// of it are not served): both count live peers only.
func TestSwarmScrapeSkipsStoppedPeers(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	now := time.Unix(1_000_000, 0)
	seeder, leecher := peerAnnounce(1, 0, EventStarted), peerAnnounce(2, 50, EventStarted)
	s.update(seeder, now)
	s.update(leecher, now)
	h := seeder.InfoHash
	require.Equal(t, scrapeFile{Complete: 1, Incomplete: 1}, s.scrape(h, now))

	for _, a := range []*Announce{leecher, seeder} {
		_, foreign := s.remove(a, now)
		require.False(t, foreign)
	}
	peers, complete, incomplete := s.peers(peerAnnounce(3, 50, EventStarted), defaultNumWant, now)
	assert.Empty(t, peers)
	assert.Zero(t, complete, "a reply's seeders")
	assert.Zero(t, incomplete, "a reply's leechers")
	assert.Equal(t, scrapeFile{}, s.scrape(h, now), "a stopped peer was counted (as a leecher)")
}

func TestScrapePathConvention(t *testing.T) {
	for in, want := range map[string]string{
		"/announce":            "/scrape",
		"/x/announce":          "/x/scrape",
		"/announce.php":        "/scrape.php",
		"/x/announce?p=1":      "/x/scrape?p=1",
		"/passkey123/announce": "/passkey123/scrape",
	} {
		got, ok := scrapePath(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"/a", "/x%064announce", "/announce/", "announce", "/x/Announce"} {
		_, ok := scrapePath(in)
		assert.False(t, ok, in)
	}
}

// scrapeReply is a decoded scrape answer.
type scrapeReply struct {
	Failure string                `bencode:"failure reason"`
	Files   map[string]scrapeFile `bencode:"files"`
}

func (h *harness) scrape(t *testing.T, query string) scrapeReply {
	t.Helper()
	resp, err := h.srv.Client().Get(h.srv.URL + "/scrape?" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var r scrapeReply
	require.NoError(t, bencode.Unmarshal(body, &r), "body %q", body)
	return r
}

// /scrape answers one or many info hashes from the local peers merged
// with what the upstreams returned, and bad input with a failure reason.
func TestScrapeServesKnownAndUpstreamCounts(t *testing.T) {
	h := newHarness(t, []string{simFast}, true)
	local, err := ParseAnnounce(clientQuery(1, 1, 7001, nil), netip.MustParseAddrPort("127.0.0.1:1"))
	require.NoError(t, err)
	known := local.InfoHash
	unknown := hashN(9)

	r := h.scrape(t, scrapeQuery(known, unknown))
	assert.Empty(t, r.Failure)
	assert.Equal(t, map[string]scrapeFile{string(known[:]): {}, string(unknown[:]): {}}, r.Files,
		"every hash asked for is listed, with zeros when unknown")

	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.announce(t, clientQuery(1, 2, 7002, map[string]string{"event": "completed", "left": "0"}))
	h.ev.wait(t, queue.EventDone, simFast, 2) // forwarded per peer: the second peer reaches the upstream too
	hits := h.sims[simFast].Hits()
	// The simulated upstream reports n peers (n/2 seeders), n+10
	// downloads; n is 3 for this hash, so it knows more leechers (2) and
	// downloads (13) than the forwarder (1 and 1), and no more seeders (1).
	r = h.scrape(t, scrapeQuery(known))
	assert.Empty(t, r.Failure)
	assert.Equal(t, map[string]scrapeFile{string(known[:]): {Complete: 1, Downloaded: 13, Incomplete: 2}}, r.Files)

	for _, q := range []string{"", "info_hash=short", scrapeQuery(known) + "&info_hash=" + strings.Repeat("z", 21)} {
		r := h.scrape(t, q)
		assert.NotEmpty(t, r.Failure, q)
		assert.Empty(t, r.Files, q)
	}
	assert.Equal(t, hits, h.sims[simFast].Hits(), "a scrape sends nothing upstream")
}
