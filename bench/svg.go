package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chart is a horizontal bar chart: one group of bars per label, one bar
// per series within a group, on a linear or log10 axis.
type chart struct {
	Title    string
	Subtitle string
	Unit     string // axis caption
	Series   []string
	Groups   []barGroup
	Log      bool
	// Format renders a value for its label and the axis ticks.
	Format func(float64) string
}

type barGroup struct {
	Label     string
	Highlight bool // this library's bars, drawn in a stronger colour
	Bars      []bar
}

type bar struct {
	Series int
	Value  float64
	Lo, Hi float64 // a whisker (min–max) when Hi > 0
}

var (
	seriesColors = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f"}
	ourColor     = "#d62728"
	peerColor    = "#7f8c9b"
)

const (
	chartWidth = 880
	labelWidth = 190
	valueRoom  = 120
	barHeight  = 16
	barGap     = 3
	groupGap   = 12
)

// SVG renders the chart as a standalone SVG document.
func (c chart) SVG() string {
	top := 56
	if len(c.Series) > 1 {
		top += 22
	}
	height := top + 40
	for _, g := range c.Groups {
		height += len(g.Bars)*(barHeight+barGap) + groupGap
	}
	plotW := float64(chartWidth - labelWidth - valueRoom)
	lo, hi := c.domain()
	x := func(v float64) float64 {
		if c.Log {
			v = math.Max(v, lo)
			return plotW * (math.Log10(v) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		}
		return plotW * v / hi
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="12" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", esc(c.Title))
	if c.Subtitle != "" {
		fmt.Fprintf(&b, `<text x="12" y="40" fill="#555">%s</text>`+"\n", esc(c.Subtitle))
	}
	if len(c.Series) > 1 {
		lx := labelWidth
		for i, s := range c.Series {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", lx, top-20, seriesColors[i%len(seriesColors)], lx+16, top-10, esc(s))
			lx += 24 + 7*len(s)
		}
	}

	axisY := height - 34
	for _, t := range c.ticks(lo, hi) {
		tx := float64(labelWidth) + x(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e3e3e3"/>`+"\n", tx, top-4, tx, axisY)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", tx, axisY+14, esc(c.Format(t)))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", labelWidth, top-4, labelWidth, axisY)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s</text>`+"\n", float64(labelWidth)+plotW/2, axisY+30, esc(c.Unit))

	y := top
	for _, g := range c.Groups {
		gh := len(g.Bars)*(barHeight+barGap) - barGap
		weight := "normal"
		if g.Highlight {
			weight = "bold"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-weight="%s">%s</text>`+"\n", labelWidth-8, y+gh/2+4, weight, esc(g.Label))
		for _, br := range g.Bars {
			color := seriesColors[br.Series%len(seriesColors)]
			if len(c.Series) <= 1 {
				color = peerColor
				if g.Highlight {
					color = ourColor
				}
			}
			w := math.Max(x(br.Value), 1)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %s: %s</title></rect>`+"\n", labelWidth, y, w, barHeight, color, esc(g.Label), esc(c.seriesName(br.Series)), esc(c.Format(br.Value)))
			if br.Hi > 0 {
				x0, x1 := float64(labelWidth)+x(br.Lo), float64(labelWidth)+x(br.Hi)
				my := float64(y) + barHeight/2.0
				fmt.Fprintf(&b, `<path d="M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f" stroke="#222" fill="none"/>`+"\n", x0, my, x1, x0, my-4, my+4, x1, my-4, my+4)
			}
			tx := float64(labelWidth) + math.Max(w, x(br.Hi)) + 6
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#222">%s</text>`+"\n", tx, y+barHeight-4, esc(c.Format(br.Value)))
			y += barHeight + barGap
		}
		y += groupGap - barGap
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func (c chart) seriesName(i int) string {
	if i < len(c.Series) {
		return c.Series[i]
	}
	return ""
}

// domain returns the axis range: 0..max (rounded up) or whole decades
// around the data on a log axis.
func (c chart) domain() (lo, hi float64) {
	minV, maxV := math.Inf(1), 0.0
	for _, g := range c.Groups {
		for _, b := range g.Bars {
			maxV = math.Max(maxV, math.Max(b.Value, b.Hi))
			if b.Value > 0 {
				minV = math.Min(minV, b.Value)
			}
		}
	}
	if maxV <= 0 {
		maxV = 1
	}
	if !c.Log {
		return 0, niceCeil(maxV)
	}
	if math.IsInf(minV, 1) {
		minV = maxV / 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(minV)))
	hi = math.Pow(10, math.Ceil(math.Log10(maxV)))
	if hi <= lo {
		hi = lo * 10
	}
	return lo, hi
}

func (c chart) ticks(lo, hi float64) []float64 {
	var ts []float64
	if c.Log {
		for v := lo; v <= hi*1.0001; v *= 10 {
			ts = append(ts, v)
		}
		return ts
	}
	step := hi / 5
	for i := 0; i <= 5; i++ {
		ts = append(ts, step*float64(i))
	}
	return ts
}

// niceCeil rounds v up to 1, 2, 2.5, 5 or 10 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string { return html.EscapeString(s) }
