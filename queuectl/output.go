package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/queuekit/queue/admin"
)

// printable returns s for a terminal: keys, targets and error texts come
// from the queue's users, so control characters (escape sequences),
// format characters (bidirectional overrides) and invalid UTF-8 are shown
// quoted, never sent to the terminal.
func printable(s string) string {
	for _, r := range s {
		if hidden(r) || r == unicode.ReplacementChar {
			q := strconv.Quote(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

// hidden reports whether r must not reach a terminal raw: a control
// character (C0, DEL, C1: escape sequences) or a format character
// (bidirectional overrides and isolates, marks, tags), which reorder or
// hide the text around it.
func hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// escapeHidden returns msg, one of queuectl's messages, with each
// hidden character written as a Go escape (\x1b, \u202e); the rest,
// quotes included, is left as it is.
func escapeHidden(msg string) string {
	if !strings.ContainsFunc(msg, hidden) {
		return msg
	}
	var b strings.Builder
	for _, r := range msg {
		if !hidden(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// shorten cuts s to n runes.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// writeJSON writes v as indented JSON. encoding/json escapes C0 controls
// but writes C1 controls and format characters (U+009B, U+202E) raw, so
// they are escaped here as JSON escapes (\u009b, \u202e): the terminal
// never gets them, and a JSON reader gets the same text back.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeJSON(b.Bytes()))
	return err
}

// escapeJSON escapes the hidden characters of encoded JSON. Outside its
// strings JSON is ASCII, so every one of them is inside a string, where
// a \u escape means the same character.
func escapeJSON(js []byte) []byte {
	if !bytes.ContainsFunc(js, func(r rune) bool { return r >= 0x80 && hidden(r) }) {
		return js
	}
	out := make([]byte, 0, len(js)+32)
	for len(js) > 0 {
		r, n := utf8.DecodeRune(js)
		if r < 0x80 || !hidden(r) {
			out = append(out, js[:n]...)
		} else if r1, r2 := utf16.EncodeRune(r); r1 != unicode.ReplacementChar {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		js = js[n:]
	}
	return out
}

// jobView is a JobInfo for JSON output: the payload is embedded as JSON
// when it is JSON (the durable stores' default codec), else base64.
type jobView struct {
	admin.JobInfo
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 []byte          `json:"payload_base64,omitempty"`
}

func view(j admin.JobInfo) jobView {
	v := jobView{JobInfo: j}
	v.JobInfo.Payload = nil
	switch {
	case j.Payload == nil:
	case json.Valid(j.Payload):
		v.Payload = j.Payload
	default:
		v.PayloadBase64 = j.Payload
	}
	return v
}

// pageJSON is a Page for JSON output.
type pageJSON struct {
	Jobs     []jobView `json:"jobs"`
	Next     string    `json:"next,omitempty"`
	Partial  bool      `json:"partial,omitempty"`  // stopped at the examined bound before the page filled
	Examined int       `json:"examined,omitempty"` // jobs of the state read for the page
}

func pageView(p admin.Page) pageJSON {
	out := pageJSON{Jobs: make([]jobView, len(p.Jobs)), Next: p.Next, Partial: p.Partial, Examined: p.Examined}
	for i, j := range p.Jobs {
		out.Jobs[i] = view(j)
	}
	return out
}

// ago words how far from now t is ("12s ago", "in 3h05m"), or "-" for
// a zero time; past two days, the UTC date.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return t.UTC().Format("2006-01-02 15:04Z")
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// writeJobTable prints a page of jobs as a table, then the next cursor.
func writeJobTable(w io.Writer, p admin.Page, payload bool) error {
	if len(p.Jobs) == 0 {
		fmt.Fprintln(w, "no jobs")
		// A partial page may be empty and still have a next page.
		return writeNext(w, p)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "ID\tSTATE\tPRIORITY\tATTEMPT\tKEY\tTARGET\tCREATED\tRUN AT\tUPDATED\tLAST ERROR"
	if payload {
		head += "\tPAYLOAD"
	}
	fmt.Fprintln(tw, head)
	for _, j := range p.Jobs {
		attempts := strconv.Itoa(j.Attempt)
		if j.MaxAttempts > 0 {
			attempts += "/" + strconv.Itoa(j.MaxAttempts)
		}
		line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", j.ID, j.State, dash(j.Priority), attempts,
			dash(shorten(printable(j.Key), 40)), dash(shorten(printable(j.Target), 24)),
			ago(j.Created, now), ago(j.RunAt, now), ago(j.Updated, now), dash(shorten(printable(j.LastError), 50)))
		if payload {
			line += "\t" + shorten(printable(string(j.Payload)), 60)
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeNext(w, p)
}

// writeNext ends a page's table: whether it is partial, and the cursor of
// the next page.
func writeNext(w io.Writer, p admin.Page) error {
	if p.Partial {
		fmt.Fprintf(w, "partial page: %d jobs examined, %d matching; more may follow\n", p.Examined, len(p.Jobs))
	}
	if p.Next != "" {
		fmt.Fprintf(w, "next page: --after %s\n", p.Next)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// writeJob prints one job, a field a line.
func writeJob(w io.Writer, j admin.JobInfo, payload bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", strconv.FormatInt(j.ID, 10))
	row("state", string(j.State))
	row("key", dash(printable(j.Key)))
	row("group", dash(printable(j.Group)))
	row("target", dash(printable(j.Target)))
	row("priority", dash(j.Priority))
	attempts := strconv.Itoa(j.Attempt)
	if j.MaxAttempts > 0 {
		attempts += " of " + strconv.Itoa(j.MaxAttempts)
	}
	row("attempt", attempts)
	row("created", stamp(j.Created))
	row("run at", stamp(j.RunAt))
	row("updated", stamp(j.Updated))
	row("last error", dash(printable(j.LastError)))
	for k, v := range j.Meta.All() {
		row("meta "+printable(k), printable(v))
	}
	if payload {
		row("payload", printable(string(j.Payload)))
	}
	return tw.Flush()
}

// statsReport is stats' output.
type statsReport struct {
	Queue           string              `json:"queue"`
	Backend         string              `json:"backend"`
	Where           string              `json:"where"`
	Paused          bool                `json:"paused"`
	Counts          map[admin.State]int `json:"counts"`
	ReadyByPriority map[string]int      `json:"ready_by_priority"`
	PendingKeys     int                 `json:"pending_keys"`
	// NotKept lists the states the store keeps no jobs in (Redis: done
	// and cancelled), which counts leaves out rather than show 0.
	NotKept    []admin.State `json:"not_kept,omitempty"`
	priorities []string
}

func (r statsReport) table(w io.Writer) error {
	state := "not paused"
	if r.Paused {
		state = "PAUSED (no process claims its jobs)"
	}
	fmt.Fprintf(w, "queue %q on %s, %s: %s\n", r.Queue, r.Backend, r.Where, state)
	for _, s := range admin.States {
		if s == admin.Waiting && r.Counts[s] == 0 {
			continue // held in process by the in-memory store only
		}
		if slices.Contains(r.NotKept, s) {
			fmt.Fprintf(w, "  %-12s %8s\n", s, "not kept")
			continue
		}
		fmt.Fprintf(w, "  %-12s %8d", s, r.Counts[s])
		if s == admin.Ready {
			var parts []string
			for _, p := range r.priorities {
				parts = append(parts, fmt.Sprintf("%s %d", p, r.ReadyByPriority[p]))
			}
			fmt.Fprintf(w, "   (%s)", strings.Join(parts, ", "))
		}
		fmt.Fprintln(w)
	}
	_, err := fmt.Fprintf(w, "  %-12s %8d\n", "pending keys", r.PendingKeys)
	return err
}

// writeTargets prints the targets' health. It has no failure or running
// columns: on a durable store those are each process's own (TargetInfo's
// Failures and Running are 0), and queuectl runs no queue.
func writeTargets(w io.Writer, ts []admin.TargetInfo) error {
	if len(ts) == 0 {
		fmt.Fprintln(w, "no targets to report")
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tSTATE\tBREAKER\tREASON")
	for _, t := range ts {
		state := "ok"
		switch {
		case t.Disabled:
			state = "disabled " + ago(t.DisabledAt, now)
		case t.SuspendedUntil.After(now):
			state = "suspended until " + ago(t.SuspendedUntil, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable(t.Name), state, dash(t.Breaker), dash(printable(t.Reason)))
	}
	return tw.Flush()
}
