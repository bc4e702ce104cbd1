package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/dszero/dszero/mem"
)

// Plot geometry: each variant gets a column of its own width; the legend
// has a column of its own to the right of the axes, so it never covers a
// bar however tall the bars are.
const (
	plotColumn  = 26 * vg.Millimeter // per variant
	plotAxes    = 30 * vg.Millimeter // the y axis and its label
	plotMinW    = 110 * vg.Millimeter
	plotHeight  = 105 * vg.Millimeter
	plotFont    = 9 // points, ticks, labels and legend
	plotTitle   = 11
	budgetSlack = 1.6 // a budget at most this far above the tallest bar is drawn to scale
)

// benchPlot draws each variant's device peak as a bar stacked by
// category with its total written above it, the estimate of its model
// states as a marker, and the device budget as a line — to a .png or .svg
// file. A budget far above the bars is named in the legend instead of
// squashing the bars to the bottom of the chart.
func benchPlot(path string, rep benchReport) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("%s: want a .png or .svg file", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %d rank(s): peak device memory per rank", rep.Model, rep.Ranks)
	p.Title.TextStyle.Font.Size = vg.Points(plotTitle)
	p.Y.Label.Text = "MiB"
	for _, s := range []*vg.Length{&p.Y.Label.TextStyle.Font.Size, &p.Y.Tick.Label.Font.Size, &p.X.Tick.Label.Font.Size} {
		*s = vg.Points(plotFont)
	}
	leg := plot.NewLegend()
	leg.TextStyle.Font.Size = vg.Points(plotFont)
	leg.Top, leg.Left = true, true
	var legW vg.Length // the legend's column is as wide as its longest entry
	addEntry := func(name string, thumbs ...plot.Thumbnailer) {
		leg.Add(name, thumbs...)
		legW = max(legW, leg.TextStyle.Width(name))
	}

	names := make([]string, len(rep.Variants))
	top := 0.0 // MiB
	for i, r := range rep.Variants {
		// Two lines, "stage 3" over "+ offload nvme", fit a column unrotated.
		names[i] = strings.Replace(r.Variant, " + ", "\n+ ", 1)
		if r.Status != "ok" {
			names[i] += "\n(" + strings.ToUpper(r.Status) + ")"
		}
		top = max(top, mib(r.PeakBytes["device"]["total"]), mib(r.Estimate))
	}
	palette := []color.Color{
		color.RGBA{0x1f, 0x77, 0xb4, 255}, color.RGBA{0xff, 0x7f, 0x0e, 255}, color.RGBA{0x2c, 0xa0, 0x2c, 255}, color.RGBA{0xd6, 0x27, 0x28, 255},
		color.RGBA{0x94, 0x67, 0xbd, 255}, color.RGBA{0x8c, 0x56, 0x4b, 255}, color.RGBA{0xe3, 0x77, 0xc2, 255}, color.RGBA{0x7f, 0x7f, 0x7f, 255},
	}
	var below *plotter.BarChart
	var entries []struct {
		name string
		bar  *plotter.BarChart
	}
	for ci, c := range mem.Categories() {
		vals := make(plotter.Values, len(rep.Variants))
		used := false
		for i, r := range rep.Variants {
			vals[i] = mib(r.PeakBytes["device"][c.String()])
			used = used || vals[i] > 0
		}
		if !used {
			continue
		}
		bar, err := plotter.NewBarChart(vals, plotColumn*0.45)
		if err != nil {
			return err
		}
		bar.Color = palette[ci%len(palette)]
		bar.LineStyle.Width = 0
		if below != nil {
			bar.StackOn(below)
		}
		below = bar
		p.Add(bar)
		entries = append(entries, struct {
			name string
			bar  *plotter.BarChart
		}{c.String(), bar})
	}
	// The legend lists the stack top down, as the bars show it.
	for i := len(entries) - 1; i >= 0; i-- {
		addEntry(entries[i].name, entries[i].bar)
	}
	// Each bar's total, just above it.
	var totals plotter.XYLabels
	for i, r := range rep.Variants {
		if v := mib(r.PeakBytes["device"]["total"]); v > 0 {
			totals.XYs = append(totals.XYs, plotter.XY{X: float64(i), Y: v})
			totals.Labels = append(totals.Labels, fmt.Sprintf("%.3g", v))
		}
	}
	if len(totals.XYs) > 0 {
		lb, err := plotter.NewLabels(totals)
		if err != nil {
			return err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(plotFont)
			lb.TextStyle[i].XAlign = draw.XCenter
		}
		lb.Offset = vg.Point{Y: vg.Points(2)}
		p.Add(lb)
	}
	var est plotter.XYs
	for i, r := range rep.Variants {
		if r.Estimate > 0 && r.Offload == "none" {
			est = append(est, plotter.XY{X: float64(i), Y: mib(r.Estimate)})
		}
	}
	if len(est) > 0 {
		sc, err := plotter.NewScatter(est)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape = draw.CrossGlyph{}
		sc.GlyphStyle.Radius = vg.Points(4)
		p.Add(sc)
		addEntry("model states, estimate", sc)
	}
	if rep.DeviceBudget > 0 {
		b := mib(rep.DeviceBudget)
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: b}, {X: float64(len(rep.Variants)) - 0.5, Y: b}})
		if err != nil {
			return err
		}
		line.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		if top > 0 && b > budgetSlack*top {
			// Drawn to scale, the bars would fill the bottom of the chart.
			addEntry(fmt.Sprintf("device budget %s: %.1f×", mem.FormatBytes(rep.DeviceBudget), b/top))
			addEntry("the tallest bar, off the chart")
		} else {
			p.Add(line)
			addEntry("device budget "+mem.FormatBytes(rep.DeviceBudget), line)
			top = max(top, b)
		}
	}
	// Head room for the totals above the tallest bar.
	p.Y.Min, p.Y.Max = 0, max(top*1.12, 1e-3)
	p.NominalX(names...)
	p.X.Padding = 0

	legW += leg.ThumbnailWidth + 8*vg.Millimeter
	w := max(plotMinW, plotAxes+vg.Length(len(rep.Variants))*plotColumn) + legW
	c, err := draw.NewFormattedCanvas(w, plotHeight, ext[1:])
	if err != nil {
		return err
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -legW, 0, 0))
	legArea := draw.Crop(dc, w-legW+3*vg.Millimeter, 0, 0, -8*vg.Millimeter)
	leg.Draw(legArea)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
