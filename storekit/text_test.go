package storekit

import (
	"testing"
)

func TestSafeText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"naïve ✓", "naïve ✓"},
		{"a\x00b", `a\x00b`},
		{"a\xffb", `a\xffb`},
		{"upstream said: a\x00b\xff", `upstream said: a\x00b\xff`},
		{"\xe2\x9c", `\xe2\x9c`}, // a sequence cut short
		{`a\x00b`, `a\x00b`},     // already escaped: unchanged
	} {
		if got := SafeText(c.in); got != c.want {
			t.Errorf("SafeText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
