package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/queuekit/queue/admin"
)

// TestMayMatchNeverRejectsAMatch checks admin listing's pre-filter
// against the decoder it saves: for records written by the add script's
// writer and rewritten by cjson (as a retry or a settle rewrites them),
// with keys, targets and priorities holding quotes, backslashes, slashes,
// control characters, invalid UTF-8 and the shield's private-use rune,
// mayMatch never rules out a record that parseMeta and matches accept,
// and it does rule out the plain records that do not match.
func TestMayMatchNeverRejectsAMatch(t *testing.T) {
	c := needRedis(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "t", "p", "k", "/", `"`, `\`, "\n", "\x01", "\x7f", "\xff", "\xe2\x82", "\ue000", "é", `":"`, `"t":"`, " ", "tracker"}
	word := func() string {
		var b []byte
		for range rng.IntN(4) {
			b = append(b, pieces[rng.IntN(len(pieces))]...)
		}
		return string(b)
	}
	var ruledOut, plain int
	for i := range 2000 {
		it := addItem{id: int64(i), key: word(), group: word(), target: word(), label: word(), lastErr: word(),
			due: 1, attempt: 1, max: 3, created: 1}
		if rng.IntN(3) == 0 {
			it.md = `{"t":"` + word() + `"}`
		}
		direct := string(append(appendMetaPrefix(nil, &it), `q"}`...))
		// cjson's rewrite: key order, escapes and all.
		rewritten, err := c.Eval(ctx, "return cjson.encode(cjson.decode(ARGV[1]))", nil, direct).Text()
		if err != nil {
			t.Fatalf("cjson rewrite of %q: %v", direct, err)
		}
		for _, rec := range []string{direct, rewritten} {
			m, ok := parseMeta(rec)
			if !ok {
				t.Fatalf("record %q does not decode", rec)
			}
			for _, f := range []admin.Filter{
				{Target: it.target}, {Target: word()}, {Target: "tracker"},
				{Priority: it.label}, {Priority: word()},
				{KeyPrefix: it.key}, {KeyPrefix: it.key[:rng.IntN(len(it.key)+1)]}, {KeyPrefix: word()},
				{Target: it.target, KeyPrefix: word(), Priority: it.label},
			} {
				if f.Target == "" && f.Priority == "" && f.KeyPrefix == "" {
					continue
				}
				want := matches(f, &m)
				got := mayMatch(rec, f)
				if want && !got {
					t.Fatalf("mayMatch(%q, %+v) = false; the decoded record %+v matches", rec, f, m)
				}
				if !want && !got {
					ruledOut++
				}
				if !want {
					plain++
				}
			}
		}
	}
	// Most non-matching records are ruled out without decoding (those
	// with an escape in the filtered field are decoded).
	if ruledOut < plain/2 {
		t.Errorf("ruled out %d of %d non-matching records without decoding them", ruledOut, plain)
	}
	if mayMatch(nil, admin.Filter{Target: "x"}) {
		t.Error("mayMatch(nil) = true; a missing record matches nothing")
	}
}
