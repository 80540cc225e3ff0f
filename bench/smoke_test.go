package bench

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmoke runs every in-process and scheduled-path case with tiny
// counts, in this process, and checks the report it writes. It proves the
// bench builds and every contender runs; it measures nothing.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("smoke pass skipped in -short mode")
	}
	res := Run(SmokeConfig(), Runner{}, testLog{t}, "go test -run TestSmoke")
	for _, e := range res.Errors() {
		t.Error(e)
	}
	wantSystems := len(InprocSystems()) * len(res.Config.Producers) * len(res.Config.Workers)
	if len(res.Inproc) != wantSystems {
		t.Errorf("ran %d in-process cases, want %d", len(res.Inproc), wantSystems)
	}
	if want := 3 * len(SchedSystems()); len(res.Sched) != want {
		t.Errorf("ran %d scheduled-path cases, want %d", len(res.Sched), want)
	}

	dir := t.TempDir()
	if err := res.WriteReport(dir, ""); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Targets", "## In-process throughput", "### Lateness", "### Held for an hour", "throughput.svg", "lateness.svg", "| channel | 10 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, name := range []string{"throughput.svg", "lateness.svg"} {
		checkSVG(t, filepath.Join(dir, name))
	}
}

// checkSVG fails unless path is well-formed XML with an svg root and at
// least one bar.
func checkSVG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	var root string
	rects := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "rect" {
				rects++
			}
		}
	}
	if root != "svg" || rects < 3 {
		t.Errorf("%s: root %q with %d rects; want an svg with bars", path, root, rects)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestWriteReportKeepsHandWrittenSections checks that rewriting a report
// keeps what follows KeepMarker and replaces what precedes it.
func TestWriteReportKeepsHandWrittenSections(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "benchmarks.md")
	hand := KeepMarker + "\n\n## Micro-benchmarks\n\nmeasured by hand\n"
	if err := os.WriteFile(md, []byte("# stale generated report\n\n"+hand), 0o644); err != nil {
		t.Fatal(err)
	}
	var res Results
	for range 2 { // a second rewrite keeps it too, once
		if err := res.WriteReport(dir, md); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got), "stale generated report") {
		t.Error("the generated part was not replaced")
	}
	if !strings.HasSuffix(string(got), "\n\n"+hand) || strings.Count(string(got), KeepMarker) != 1 {
		t.Errorf("the hand-written part was not kept once at the end:\n%s", got)
	}
	if !strings.HasPrefix(string(got), res.Markdown()[:20]) {
		t.Errorf("the report does not start with the generated markdown:\n%.200s", got)
	}
}
