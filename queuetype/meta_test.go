package queuetype_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/queuekit/queue/queuetype"
)

func TestMetaSetGetDelete(t *testing.T) {
	var m queuetype.Meta
	if !m.IsZero() || m.Len() != 0 || m.Keys() != nil || m.Map() != nil || m.Get("a") != "" {
		t.Fatalf("zero Meta is not empty: %#v", m)
	}
	m.Set("b", "2")
	m.Set("a", "1")
	m.Set("c", "3")
	m.Set("b", "two")
	if got, want := m.Keys(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("Keys = %q, want %q", got, want)
	}
	if v, ok := m.Lookup("b"); !ok || v != "two" {
		t.Fatalf(`Lookup("b") = %q, %v; want "two", true`, v, ok)
	}
	if _, ok := m.Lookup("bb"); ok {
		t.Fatal(`Lookup("bb") found a key that was never set`)
	}
	if m.Len() != 3 || m.Size() != 1+1+1+3+1+1 {
		t.Fatalf("Len %d, Size %d; want 3, 8", m.Len(), m.Size())
	}
	c := m
	c.Set("a", "changed")
	c.Delete("c")
	if m.Get("a") != "1" || m.Get("c") != "3" {
		t.Fatal("a change to a copy changed the original")
	}
	m.Delete("b")
	m.Delete("missing")
	if got := m.Map(); len(got) != 2 || got["a"] != "1" || got["c"] != "3" {
		t.Fatalf("after Delete: %v", got)
	}
	if queuetype.MetaOf(map[string]string{"c": "3", "a": "1"}) != m {
		t.Fatal("MetaOf of the same pairs is not == to the Meta built with Set")
	}
	if queuetype.MetaOf(nil) != (queuetype.Meta{}) {
		t.Fatal("MetaOf(nil) is not the zero Meta")
	}
	m.Delete("a")
	m.Delete("c")
	if m != (queuetype.Meta{}) {
		t.Fatal("a Meta emptied by Delete is not == the zero Meta")
	}
}

func TestMetaJSON(t *testing.T) {
	m := queuetype.MetaOf(map[string]string{"z": "last", "tenant": "日本", "q": `"<&>\`})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"q":"\"\u003c\u0026\u003e\\","tenant":"日本","z":"last"}`; string(b) != want {
		t.Fatalf("MarshalJSON = %s, want %s", b, want)
	}
	var back queuetype.Meta
	if err := json.Unmarshal(b, &back); err != nil || back != m {
		t.Fatalf("round trip: %v, %v; want %v", back.Map(), err, m.Map())
	}
	if b, _ := json.Marshal(queuetype.Meta{}); string(b) != "{}" {
		t.Fatalf("empty Meta marshals as %s, want {}", b)
	}
	if err := json.Unmarshal([]byte("null"), &back); err != nil || !back.IsZero() {
		t.Fatalf("null: %v, %v; want empty", back.Map(), err)
	}
	for _, bad := range []string{`[]`, `{"a":1}`, `"x"`, `{"a":{"b":"c"}}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil || !strings.Contains(err.Error(), "Meta") {
			t.Errorf("UnmarshalJSON(%s) = %v, want an error naming Meta", bad, err)
		}
	}
	// Inside a struct, omitzero leaves an empty Meta out.
	type wrap struct {
		M queuetype.Meta `json:"meta,omitzero"`
	}
	if b, _ := json.Marshal(wrap{}); string(b) != "{}" {
		t.Fatalf("omitzero: %s", b)
	}
}

func TestMetaCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		m    queuetype.Meta
		want string // "" means valid
	}{
		{"empty", queuetype.Meta{}, ""},
		{"ok", queuetype.MetaOf(map[string]string{"a": "", "b": "日本"}), ""},
		{"limit", queuetype.MetaOf(map[string]string{"k": strings.Repeat("v", queuetype.MaxMetaSize-1)}), ""},
		{"empty key", queuetype.MetaOf(map[string]string{"": "v"}), "empty key"},
		{"long key", queuetype.MetaOf(map[string]string{strings.Repeat("k", 129): "v"}), "129 bytes"},
		{"NUL key", queuetype.MetaOf(map[string]string{"a\x00": "v"}), `key "a\x00"`},
		{"bad UTF-8 value", queuetype.MetaOf(map[string]string{"a": "\xff"}), `value of key "a"`},
		{"NUL value", queuetype.MetaOf(map[string]string{"a": "x\x00"}), `value of key "a"`},
		{"too big", queuetype.MetaOf(map[string]string{"k": strings.Repeat("v", queuetype.MaxMetaSize)}), "4097 bytes"},
	} {
		err := c.m.Check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: Check = %v, want nil", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: Check = %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// FuzzMeta: any sequence of Sets and Deletes leaves a Meta equal to the
// map that saw the same operations, through JSON and back when valid.
func FuzzMeta(f *testing.F) {
	f.Add("a", "1", "b", "2", true)
	f.Add("", "", "\xff", "\x00", false)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, del bool) {
		var m queuetype.Meta
		want := map[string]string{}
		m.Set(k1, v1)
		want[k1] = v1
		m.Set(k2, v2)
		want[k2] = v2
		if del {
			m.Delete(k1)
			delete(want, k1)
		}
		if got := m.Map(); len(got) != len(want) {
			t.Fatalf("Map = %q, want %q", got, want)
		}
		for k, v := range want {
			if got, ok := m.Lookup(k); !ok || got != v {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", k, got, ok, v)
			}
		}
		if m != queuetype.MetaOf(want) {
			t.Fatal("not == to MetaOf of the same pairs")
		}
		if m.Check() == nil {
			b, err := m.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			var back queuetype.Meta
			if err := back.UnmarshalJSON(b); err != nil || back != m {
				t.Fatalf("JSON round trip of %q: %q, %v", want, back.Map(), err)
			}
		}
	})
}
