package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetype"
	"github.com/stretchr/testify/require"
)

// TestPrintable: what the queue's users wrote (keys, targets, errors)
// never reaches the terminal as control characters.
func TestPrintable(t *testing.T) {
	require.Equal(t, "tracker:hash", printable("tracker:hash"))
	require.Equal(t, `\x1b[31mred\x1b[0m`, printable("\x1b[31mred\x1b[0m"))
	require.Equal(t, `two\nlines`, printable("two\nlines"))
	require.Equal(t, "<script>é", printable("<script>é"))
	require.Equal(t, `evil\u202etxt.exe`, printable("evil\u202etxt.exe"))
	require.Equal(t, `\xff`, printable("\xff"))

	var b bytes.Buffer
	require.NoError(t, writeJobTable(&b, admin.Page{Jobs: []admin.JobInfo{{ID: 7, State: admin.Dead, Key: "k\x1b]0;pwned\x07", LastError: "bad\r\nthing"}}}, false))
	require.NotContains(t, b.String(), "\x1b")
	require.NotContains(t, b.String(), "\r")
	require.Contains(t, b.String(), `k\x1b]0;pwned\a`)
	require.Contains(t, b.String(), `bad\r\nthing`)
}

// TestShowMeta: show prints each metadata pair on a row of its own,
// escaped like every other text; -o json escapes it the same way.
func TestShowMeta(t *testing.T) {
	j := admin.JobInfo{ID: 7, State: admin.Ready, Meta: queuetype.MetaOf(map[string]string{
		"tenant": "acme", "evil\x1b]0;x": "v\u202eexe"})}
	var b bytes.Buffer
	require.NoError(t, writeJob(&b, j, false))
	out := b.String()
	require.Contains(t, out, "meta tenant")
	require.Contains(t, out, `meta evil\x1b]0;x`)
	require.Contains(t, out, `v\u202eexe`)
	require.NotContains(t, out, "\x1b")
	require.NotContains(t, out, "\u202e")
	b.Reset()
	require.NoError(t, writeJSON(&b, view(j)))
	require.NotContains(t, b.String(), "\u202e")
	var back admin.JobInfo
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	require.Equal(t, j.Meta, back.Meta)
}

// TestAgo: times are worded relative to now.
func TestAgo(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "-"},
		{now, "now"},
		{now.Add(-12 * time.Second), "12s ago"},
		{now.Add(-(5*time.Minute + 3*time.Second)), "5m03s ago"},
		{now.Add(23*time.Hour + 59*time.Minute + 30*time.Second), "in 23h59m"},
		{now.Add(-72 * time.Hour), "2029-12-29 12:00Z"},
	} {
		require.Equal(t, tc.want, ago(tc.t, now))
	}
}

// TestJobJSON: a JSON payload is embedded as JSON, any other as base64.
func TestJobJSON(t *testing.T) {
	require.JSONEq(t, `{"n":1}`, string(view(admin.JobInfo{Payload: []byte(`{"n":1}`)}).Payload))
	v := view(admin.JobInfo{Payload: []byte{0xff, 0x00}})
	require.Nil(t, v.Payload)
	require.Equal(t, []byte{0xff, 0x00}, v.PayloadBase64)
	require.Nil(t, view(admin.JobInfo{}).Payload)
}

// TestJSONEscaped: -o json escapes the same characters as the tables,
// as JSON escapes (\u009b, \u202e), so the terminal never gets them raw
// and a JSON reader gets the text back unchanged.
func TestJSONEscaped(t *testing.T) {
	j := admin.JobInfo{ID: 7, State: admin.Dead, Key: "k-\u202etxt.exe", Target: "t\u009b31m",
		LastError: "\x1b[2J \u2066iso\u2069 \u200e \U000e0041 é<"}
	var b bytes.Buffer
	require.NoError(t, writeJSON(&b, view(j)))
	out := b.String()
	for _, r := range []string{"\u202e", "\u009b", "\x1b", "\u2066", "\u2069", "\u200e", "\U000e0041"} {
		require.NotContains(t, out, r)
	}
	require.Contains(t, out, `k-\u202etxt.exe`)
	require.Contains(t, out, `t\u009b31m`)
	require.Contains(t, out, `\udb40\udc41`)
	require.Contains(t, out, "é")
	var back admin.JobInfo
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	require.Equal(t, j.Key, back.Key)
	require.Equal(t, j.Target, back.Target)
	require.Equal(t, j.LastError, back.LastError)
}
