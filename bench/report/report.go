// Package report writes load-test results to disk: the JSON result and PNG plots (latency
// percentile curve, latency over time, per-node load) drawn with gonum.org/v1/plot.
//
// Functions here are stateless and safe for concurrent use on different output paths.
package report

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/relevance-scoring/relevance/bench/load"
)

// WriteJSON writes v as indented JSON to path, creating the folder.
func WriteJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteLoad writes result.json, latency-cdf.png, latency-time.png and (when the proxy's node
// view was polled) node-load.png into dir. title heads every plot ("EMULATED" included by the
// caller when it applies).
func WriteLoad(dir, title string, r *load.Result) error {
	if err := WriteJSON(filepath.Join(dir, "result.json"), r); err != nil {
		return err
	}
	if len(r.CDF) > 0 {
		if err := PercentilePlot(filepath.Join(dir, "latency-cdf.png"), title+": latency by percentile",
			[]Series{{Name: "latency", CDF: r.CDF}}); err != nil {
			return err
		}
	}
	if len(r.Points) > 0 {
		if err := timePlot(filepath.Join(dir, "latency-time.png"), title+": latency over time", r); err != nil {
			return err
		}
	}
	if len(r.Nodes) > 0 {
		if err := nodePlot(filepath.Join(dir, "node-load.png"), title+": per-node load (proxy view)", r.Nodes); err != nil {
			return err
		}
	}
	return nil
}

// Series is one named latency distribution.
type Series struct {
	Name string
	CDF  []load.Quantile
}

// nines maps a quantile q to -log10(1-q), so 90 %, 99 %, 99.9 % are equally spaced: tail
// latency gets the room it deserves.
func nines(q float64) float64 {
	if q >= 0.99999 {
		q = 0.99999
	}
	return -math.Log10(1 - q)
}

type ninesTicks struct{}

func (ninesTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for _, q := range []struct {
		q     float64
		label string
	}{{0, "0%"}, {0.5, "50%"}, {0.9, "90%"}, {0.99, "99%"}, {0.999, "99.9%"}, {0.9999, "99.99%"}} {
		x := nines(q.q)
		if x >= min-1e-9 && x <= max+1e-9 {
			ts = append(ts, plot.Tick{Value: x, Label: q.label})
		}
	}
	return ts
}

// ticks125 labels a log axis at 1, 2 and 5 × 10^k (plot.LogTicks labels only powers of ten,
// which leaves a 100–1000 ms axis with no numbers).
type ticks125 struct{}

func (ticks125) Ticks(min, max float64) []plot.Tick {
	if min <= 0 {
		min = 1e-3
	}
	var ts []plot.Tick
	for e := math.Floor(math.Log10(min)); e <= math.Ceil(math.Log10(max)); e++ {
		for m := 1; m < 10; m++ {
			v := float64(m) * math.Pow(10, e)
			if v < min*0.999 || v > max*1.001 {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// PercentilePlot draws latency (ms, log scale) against percentile for each series.
func PercentilePlot(path, title string, series []Series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms)"
	p.X.Tick.Marker = ninesTicks{}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = ticks125{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, s := range series {
		var xy plotter.XYs
		for _, q := range s.CDF {
			if q.Ms <= 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: nines(q.Q), Y: q.Ms})
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		l.Color = palette(i)
		l.Width = vg.Points(1.5)
		l.Dashes = dashes(i)
		p.Add(l)
		if len(series) > 1 {
			p.Legend.Add(s.Name, l)
		}
	}
	return save(p, path, 8, 5)
}

func timePlot(path, title string, r *load.Result) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "intended send time (s)"
	p.Y.Label.Text = "latency (ms)"
	p.Add(plotter.NewGrid())
	pts := make(plotter.XYs, len(r.Points))
	for i, pt := range r.Points {
		pts[i] = plotter.XY{X: pt.T, Y: pt.Ms}
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	sc.GlyphStyle.Radius = vg.Points(1)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Color = color.NRGBA{R: 40, G: 90, B: 200, A: 140}
	p.Add(sc)
	var p99 plotter.XYs
	for _, w := range r.Timeline {
		if w.OK > 0 {
			p99 = append(p99, plotter.XY{X: w.T + 0.5, Y: w.P99ms})
		}
	}
	if len(p99) > 1 {
		l, err := plotter.NewLine(p99)
		if err == nil {
			l.Color = color.RGBA{R: 200, A: 255}
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add("p99 per second", l)
		}
	}
	if r.SLOms > 0 {
		slo := plotter.NewFunction(func(float64) float64 { return r.SLOms })
		slo.Color = color.Gray{Y: 90}
		slo.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(slo)
		p.Legend.Add(fmt.Sprintf("SLO %.0f ms", r.SLOms), slo)
	}
	p.Legend.Top = true
	return save(p, path, 9, 5)
}

func nodePlot(path, title string, samples []load.NodeSample) error {
	byNode := map[string]plotter.XYs{}
	for _, s := range samples {
		byNode[s.Node] = append(byNode[s.Node], plotter.XY{X: s.T, Y: s.Load})
	}
	names := make([]string, 0, len(byNode))
	for n := range byNode {
		names = append(names, n)
	}
	sort.Strings(names)
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "in-flight load (estimated cost s, or batches)"
	p.Add(plotter.NewGrid())
	for i, n := range names {
		l, err := plotter.NewLine(byNode[n])
		if err != nil {
			continue
		}
		l.Color = palette(i)
		p.Add(l)
		if len(names) <= 16 {
			p.Legend.Add(n, l)
		}
	}
	p.Legend.Top = true
	return save(p, path, 9, 5)
}

// LinePlot draws y against x for named series (used by compare: p99 against load).
func LinePlot(path, title, xLabel, yLabel string, logY bool, names []string, xs [][]float64, ys [][]float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = ticks125{}
	}
	p.Add(plotter.NewGrid())
	for i, n := range names {
		var xy plotter.XYs
		for j := range xs[i] {
			if logY && ys[i][j] <= 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: xs[i][j], Y: ys[i][j]})
		}
		if len(xy) == 0 {
			continue
		}
		lp, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		lp.Color = palette(i)
		lp.Dashes = dashes(i)
		pts.Color = palette(i)
		pts.Shape = draw.CircleGlyph{}
		p.Add(lp, pts)
		p.Legend.Add(n, lp)
	}
	// Leave the top ~45 % of the axis empty for the legend, so it never covers a line.
	if logY && p.Y.Min > 0 {
		p.Y.Max = p.Y.Min * math.Pow(p.Y.Max/p.Y.Min, 1.8)
	} else {
		p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)*1.8
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return save(p, path, 10, 7)
}

func save(p *plot.Plot, path string, w, h vg.Length) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := p.Save(w*vg.Inch, h*vg.Inch, path); err != nil {
		return fmt.Errorf("save plot %s: %w", path, err)
	}
	return nil
}

var colors = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255},
}

func palette(i int) color.Color { return colors[i%len(colors)] }

func dashes(i int) []vg.Length {
	if (i/len(colors))%2 == 1 {
		return []vg.Length{vg.Points(5), vg.Points(3)}
	}
	return nil
}

// Table formats rows as an aligned text table (also valid as a markdown table when md is set).
func Table(header []string, rows [][]string, md bool) string {
	w := make([]int, len(header))
	for i, h := range header {
		w[i] = len([]rune(h))
	}
	for _, r := range rows {
		for i, c := range r {
			if n := len([]rune(c)); n > w[i] {
				w[i] = n
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		if md {
			b.WriteString("| ")
		}
		for i, c := range cells {
			pad := w[i] - len([]rune(c))
			if i == 0 {
				b.WriteString(c + strings.Repeat(" ", pad))
			} else {
				b.WriteString(strings.Repeat(" ", pad) + c)
			}
			if i < len(cells)-1 {
				if md {
					b.WriteString(" | ")
				} else {
					b.WriteString("  ")
				}
			}
		}
		if md {
			b.WriteString(" |")
		}
		b.WriteByte('\n')
	}
	line(header)
	if md {
		sep := make([]string, len(header))
		for i := range sep {
			sep[i] = strings.Repeat("-", w[i])
			if i > 0 {
				sep[i] = sep[i][:len(sep[i])-1] + ":"
			}
		}
		line(sep)
	}
	for _, r := range rows {
		line(r)
	}
	return b.String()
}
