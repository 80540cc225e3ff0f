package main

import (
	"net/http"
	"strings"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/prometheus/client_golang/prometheus"
)

// maxScrapeHashes bounds the info hashes one scrape may name, as
// opentracker does (64); a longer list gets a failure reason.
const maxScrapeHashes = 64

// scrapeFile is one torrent's entry in a scrape's "files" (BEP 48).
type scrapeFile struct {
	Complete   int64 `bencode:"complete"`
	Downloaded int64 `bencode:"downloaded"`
	Incomplete int64 `bencode:"incomplete"`
}

type scrapeResponse struct {
	Files map[string]scrapeFile `bencode:"files"`
}

// parseScrape returns the distinct info hashes of a scrape query, in
// order. Every error is an *announceError, fit for a client: a query over
// 8 KiB, a malformed one, no info_hash (a full scrape, which BEP 48 leaves
// optional and this tracker does not serve: it would list every torrent
// its clients use), more than maxScrapeHashes, or one not 20 bytes long.
func parseScrape(raw string) ([][20]byte, error) {
	if len(raw) > maxQueryLen {
		return nil, badRequest("request too long")
	}
	var hashes [][20]byte
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if strings.IndexByte(kv, ';') >= 0 {
			return nil, errMalformed
		}
		k, v, _ := strings.Cut(kv, "=")
		k, err := unescape(k)
		if err != nil {
			return nil, err
		}
		if k != "info_hash" {
			continue
		}
		if v, err = unescape(v); err != nil {
			return nil, err
		}
		if len(v) != 20 {
			return nil, badRequest("invalid info_hash: want 20 bytes, got %d", len(v))
		}
		h := [20]byte([]byte(v))
		if !containsHash(hashes, h) {
			if len(hashes) == maxScrapeHashes {
				return nil, badRequest("too many info_hash: at most %d per scrape", maxScrapeHashes)
			}
			hashes = append(hashes, h)
		}
	}
	if len(hashes) == 0 {
		return nil, badRequest("missing info_hash: full scrape is not served")
	}
	return hashes, nil
}

func containsHash(hs [][20]byte, h [20]byte) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}

// ServeScrape answers a BEP 48 scrape: for each info_hash, its seeders
// (complete), leechers (incomplete) and completed downloads, as the
// forwarder knows them (see swarms.scrape). A torrent it does not know is
// listed with zeros rather than left out, so a client asking for it reads
// an answer, not a malformed reply. Errors are a bencoded failure reason
// with HTTP 200, as for announces.
func (f *Forwarder) ServeScrape(w http.ResponseWriter, r *http.Request) {
	f.budget.served()
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Cache-Control", "no-cache")
	hashes, err := parseScrape(r.URL.RawQuery)
	if err != nil {
		f.scrapes.bad.Inc()
		w.Write(encodeFailure(err.Error(), 0))
		return
	}
	now := f.opts.Now()
	resp := scrapeResponse{Files: make(map[string]scrapeFile, len(hashes))}
	for _, h := range hashes {
		resp.Files[string(h[:])] = f.swarms.scrape(h, now)
	}
	f.scrapes.ok.Inc()
	w.Write(bencode.MustMarshal(resp))
}

// scrape returns h's counts: for each of complete, downloaded and
// incomplete, the largest of the forwarder's own count (its live local
// peers; the first completed events they sent) and each live upstream
// reply's. Not the sum: an upstream's counts include the local peers
// forwarded to it, and upstreams' swarms overlap (public peers announce
// to several trackers), so a sum would count the same peers two or more
// times. The largest is a lower bound that counts no peer twice and
// reaches the true figure whenever one source sees the whole swarm.
// UDP upstreams (BEP 15) report no downloaded count.
func (s *swarms) scrape(h [20]byte, now time.Time) scrapeFile {
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	swi := sh.getLocked(h, false)
	if swi == none {
		return scrapeFile{}
	}
	sw := &sh.sws[swi]
	t := s.ns(now)
	var c scrapeFile
	for i := range sw.members {
		p := &sw.members[i]
		if !s.live(p, t) {
			continue
		}
		if p.seeder {
			c.Complete++
		} else {
			c.Incomplete++
		}
	}
	c.Downloaded = sw.downloaded
	for _, u := range sw.upstream {
		if now.Before(u.expires) {
			c.Complete = max(c.Complete, u.complete)
			c.Incomplete = max(c.Incomplete, u.incomplete)
			c.Downloaded = max(c.Downloaded, u.downloaded)
		}
	}
	return c
}

// scrapeCounters are forwarder_scrapes_total's children, looked up once.
type scrapeCounters struct{ ok, bad prometheus.Counter }

func (f *Forwarder) registerScrapeMetrics() error {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forwarder_scrapes_total",
		Help: "Client scrapes by result: ok, bad_request.",
	}, []string{"result"})
	if err := f.reg.Register(v); err != nil {
		return err
	}
	f.scrapes = scrapeCounters{ok: v.WithLabelValues("ok"), bad: v.WithLabelValues("bad_request")}
	return nil
}

// scrapePath is the scrape path BEP 48's convention derives from an
// announce path: its last segment must begin with "announce", which
// becomes "scrape" (/announce → /scrape, /x/announce.php → /x/scrape.php).
// ok is false for a path that does not follow the convention: such a
// tracker has no scrape.
func scrapePath(announce string) (path string, ok bool) {
	i := strings.LastIndexByte(announce, '/')
	if i < 0 || !strings.HasPrefix(announce[i+1:], "announce") {
		return "", false
	}
	return announce[:i+1] + "scrape" + announce[i+1+len("announce"):], true
}
