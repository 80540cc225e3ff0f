package redisstore

import "testing"

// TestParseMetaKeepsBytes: a meta record whose key, group or error text is
// not UTF-8 is read back byte for byte, private-use runes included.
func TestParseMetaKeepsBytes(t *testing.T) {
	for _, k := range []string{"a\xffb", "\xfe\xff", "x\ue000\xff\ue100", "\ue000\ue000", "plain"} {
		raw := string(appendJSONString([]byte(`{"k":`), k)) + `,"g":` + string(appendJSONString(nil, k)) +
			`,"e":` + string(appendJSONString(nil, "a\x00b"+k)) + `}`
		m, ok := parseMeta(raw)
		if !ok || m.Key != k || m.Group != k || m.Err != "a\x00b"+k {
			t.Errorf("parseMeta(%q) = key %q, group %q, err %q, %v; want key and group %q", raw, m.Key, m.Group, m.Err, ok, k)
		}
	}
}
