package queuetype

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxMetaSize is the most metadata a job may carry: the sum of the
// lengths of its keys and values, in bytes. Enqueue refuses a job over it
// (ErrInvalidJob). It is counted apart from the payload limit.
const MaxMetaSize = 4096

// MaxMetaKeyLen is the longest metadata key Enqueue accepts, in bytes.
const MaxMetaKeyLen = 128

// Meta is a job's metadata: a small set of string key/value pairs, such
// as a trace context, a tenant or a request ID, that travels with the job.
// Every store keeps it with the job and hands it back unchanged at every
// run, retry, rescue and admin retry; admin listings, queuectl show and the
// dashboard's job detail show it. The queue itself never reads it.
//
// The zero Meta is empty and ready to use. A Meta is a value, like a
// string: a copy does not share state with the original, so a Set on one
// copy never changes another, and two Metas holding the same pairs are
// equal (==). Set, Delete and UnmarshalJSON have pointer receivers;
// *Meta therefore satisfies OpenTelemetry's propagation.TextMapCarrier
// (Get, Set, Keys), so a propagator can inject into and extract from a
// job's metadata directly.
//
// Enqueue checks the rules of [Meta.Check]: keys are non-empty and at most
// [MaxMetaKeyLen] bytes, keys and values are valid UTF-8 without NUL
// bytes, and the whole is at most [MaxMetaSize] bytes.
type Meta struct {
	// s holds the pairs sorted by key, each as uvarint(len(key)), key,
	// uvarint(len(value)), value. Keys are unique.
	s string
}

// MetaOf returns the metadata holding pairs. A nil or empty map gives the
// zero Meta.
func MetaOf(pairs map[string]string) Meta {
	if len(pairs) == 0 {
		return Meta{}
	}
	keys := make([]string, 0, len(pairs))
	n := 0
	for k, v := range pairs {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = appendPair(b, k, pairs[k])
	}
	return Meta{s: string(b)}
}

func appendPair(b []byte, k, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(k)))
	b = append(b, k...)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// pair decodes the pair at offset i of s and returns it with the offset
// of the next one.
func pair(s string, i int) (k, v string, next int) {
	n, w := uvarint(s[i:])
	i += w
	k, i = s[i:i+n], i+n
	n, w = uvarint(s[i:])
	i += w
	return k, s[i : i+n], i + n
}

func uvarint(s string) (int, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x80 {
			return int(x | uint64(c)<<shift), i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	panic("queuetype: corrupt Meta")
}

// Get returns the value of key, or "" when the metadata has no such key.
func (m Meta) Get(key string) string {
	v, _ := m.Lookup(key)
	return v
}

// Lookup returns the value of key and whether the metadata has it.
func (m Meta) Lookup(key string) (string, bool) {
	for i := 0; i < len(m.s); {
		k, v, next := pair(m.s, i)
		if k == key {
			return v, true
		}
		if k > key {
			break
		}
		i = next
	}
	return "", false
}

// Set sets key to value, replacing any value the key had. It accepts any
// strings; Enqueue refuses metadata that breaks the rules of [Meta.Check].
func (m *Meta) Set(key, value string) {
	b := make([]byte, 0, len(m.s)+len(key)+len(value)+2*binary.MaxVarintLen32)
	done := false
	for i := 0; i < len(m.s); {
		k, v, next := pair(m.s, i)
		switch {
		case k == key:
			b = appendPair(b, key, value)
			done = true
		case k > key && !done:
			b = appendPair(b, key, value)
			b = appendPair(b, k, v)
			done = true
		default:
			b = appendPair(b, k, v)
		}
		i = next
	}
	if !done {
		b = appendPair(b, key, value)
	}
	m.s = string(b)
}

// Delete removes key, if the metadata has it.
func (m *Meta) Delete(key string) {
	for i := 0; i < len(m.s); {
		k, _, next := pair(m.s, i)
		if k == key {
			m.s = m.s[:i] + m.s[next:]
			return
		}
		i = next
	}
}

// Keys returns the keys, sorted. It returns nil for empty metadata.
func (m Meta) Keys() []string {
	var keys []string
	for k := range m.All() {
		keys = append(keys, k)
	}
	return keys
}

// All returns an iterator over the pairs, in the order of their keys.
func (m Meta) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := 0; i < len(m.s); {
			k, v, next := pair(m.s, i)
			if !yield(k, v) {
				return
			}
			i = next
		}
	}
}

// Map returns the pairs as a new map, or nil for empty metadata.
func (m Meta) Map() map[string]string {
	if m.s == "" {
		return nil
	}
	out := make(map[string]string)
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

// Len returns the number of pairs.
func (m Meta) Len() int {
	n := 0
	for range m.All() {
		n++
	}
	return n
}

// IsZero reports whether the metadata is empty.
func (m Meta) IsZero() bool { return m.s == "" }

// Size returns the bytes the metadata counts against [MaxMetaSize]: the
// sum of the lengths of its keys and values.
func (m Meta) Size() int {
	n := 0
	for k, v := range m.All() {
		n += len(k) + len(v)
	}
	return n
}

// Check returns an error naming the first rule the metadata breaks, or
// nil: a key that is empty, longer than [MaxMetaKeyLen] bytes, not valid
// UTF-8 or holding a NUL byte; a value that is not valid UTF-8 or holds a
// NUL byte; or a total size ([Meta.Size]) over [MaxMetaSize]. Enqueue
// wraps the error with ErrInvalidJob. The rules keep metadata storable as
// text on every store and safe to show.
func (m Meta) Check() error {
	for k, v := range m.All() {
		switch {
		case k == "":
			return errors.New("Meta has an empty key")
		case len(k) > MaxMetaKeyLen:
			return fmt.Errorf("Meta key %s is %d bytes; a key may be at most %d", quoteShort(k), len(k), MaxMetaKeyLen)
		case !utf8.ValidString(k) || strings.IndexByte(k, 0) >= 0:
			return fmt.Errorf("Meta key %s is not valid UTF-8 text without NUL bytes", quoteShort(k))
		case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("Meta value of key %s is not valid UTF-8 text without NUL bytes", quoteShort(k))
		}
	}
	if n := m.Size(); n > MaxMetaSize {
		return fmt.Errorf("Meta is %d bytes (keys and values); it may be at most %d", n, MaxMetaSize)
	}
	return nil
}

// quoteShort quotes s for an error message, cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q…", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

// MarshalJSON encodes the metadata as a JSON object of strings with its
// keys sorted: {} when it is empty. Durable stores keep this text.
func (m Meta) MarshalJSON() ([]byte, error) {
	if m.s == "" {
		return []byte("{}"), nil
	}
	b := make([]byte, 0, len(m.s)+16)
	b = append(b, '{')
	first := true
	for k, v := range m.All() {
		if !first {
			b = append(b, ',')
		}
		first = false
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		b = append(b, kb...)
		b = append(b, ':')
		b = append(b, vb...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON sets the metadata from a JSON object whose values are
// strings; null gives empty metadata. Anything else is an error that
// says what was found.
func (m *Meta) UnmarshalJSON(b []byte) error {
	var pairs map[string]string
	if err := json.Unmarshal(b, &pairs); err != nil {
		return fmt.Errorf("queue: Meta must be a JSON object of strings: %w", err)
	}
	*m = MetaOf(pairs)
	return nil
}
