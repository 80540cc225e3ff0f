package storekit

import (
	"strings"
	"unicode/utf8"
)

// SafeText returns s as every store can keep it: unchanged when it is
// valid UTF-8 without a NUL byte (the common case, checked without
// allocating), or else with each NUL byte written as the four characters
// \x00 and each byte that is not part of a UTF-8 sequence as \xNN (its
// value in hex), so that the text stays readable and PostgreSQL's text
// type accepts it. The stores pass error texts (a handler's error, a
// cancellation's reason) through it before they write them, so that the
// same text is shown on every store, and no text can make an outcome's
// write fail.
func SafeText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0 || r == utf8.RuneError && n == 1 {
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// ErrorText returns err's text as SafeText, or "" for nil.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return SafeText(err.Error())
}
