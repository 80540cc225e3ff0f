package storekit

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestShortReason(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int // length of the result
	}{
		{"empty", "", 0},
		{"fits", strings.Repeat("a", MaxReasonLen), MaxReasonLen},
		{"ascii", strings.Repeat("a", MaxReasonLen+1), MaxReasonLen},
		{"two-byte", strings.Repeat("é", 200), 252 + 3},  // 126 é fit in 253 bytes
		{"four-byte", strings.Repeat("😀", 100), 252 + 3}, // 63 of them
		{"invalid", "bad \xff\xfe byte", len(`bad \xff\xfe byte`)},
		{"nul", "a\x00b", len(`a\x00b`)},
	} {
		got := ShortReason(tc.in)
		if len(got) != tc.want || !utf8.ValidString(got) || len(got) > MaxReasonLen {
			t.Errorf("%s: ShortReason gave %d bytes (valid UTF-8 %v), want %d", tc.name, len(got), utf8.ValidString(got), tc.want)
		}
		if strings.IndexByte(got, 0) >= 0 {
			t.Errorf("%s: %q holds a NUL byte", tc.name, got)
		}
		if len(tc.in) > MaxReasonLen && (!strings.HasSuffix(got, "...") || !strings.HasPrefix(tc.in, strings.TrimSuffix(got, "..."))) {
			t.Errorf("%s: %q is not the start of the reason and ...", tc.name, got)
		}
	}
}
