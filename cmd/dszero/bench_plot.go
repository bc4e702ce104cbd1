package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/dszero/dszero/mem"
)

// benchPlot draws each variant's device peak as a bar stacked by category,
// the estimate of its model states as a marker, and the device budget as a
// line, to a .png or .svg file.
func benchPlot(path string, rep benchReport) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return fmt.Errorf("%s: want a .png or .svg file", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s on %d rank(s): peak device memory per rank", rep.Model, rep.Ranks)
	p.Y.Label.Text = "MiB"
	names := make([]string, len(rep.Variants))
	for i, r := range rep.Variants {
		names[i] = r.Variant
		if r.Status != "ok" {
			names[i] += " (" + strings.ToUpper(r.Status) + ")"
		}
	}
	palette := []color.Color{
		color.RGBA{0x1f, 0x77, 0xb4, 255}, color.RGBA{0xff, 0x7f, 0x0e, 255}, color.RGBA{0x2c, 0xa0, 0x2c, 255}, color.RGBA{0xd6, 0x27, 0x28, 255},
		color.RGBA{0x94, 0x67, 0xbd, 255}, color.RGBA{0x8c, 0x56, 0x4b, 255}, color.RGBA{0xe3, 0x77, 0xc2, 255}, color.RGBA{0x7f, 0x7f, 0x7f, 255},
	}
	w := vg.Points(18)
	var below *plotter.BarChart
	for ci, c := range mem.Categories() {
		vals := make(plotter.Values, len(rep.Variants))
		any := false
		for i, r := range rep.Variants {
			vals[i] = float64(r.PeakBytes["device"][c.String()]) / (1 << 20)
			any = any || vals[i] > 0
		}
		if !any {
			continue
		}
		bar, err := plotter.NewBarChart(vals, w)
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
		p.Legend.Add(c.String(), bar)
	}
	var est plotter.XYs
	for i, r := range rep.Variants {
		if r.Estimate > 0 && r.Offload == "none" {
			est = append(est, plotter.XY{X: float64(i), Y: float64(r.Estimate) / (1 << 20)})
		}
	}
	if len(est) > 0 {
		sc, err := plotter.NewScatter(est)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape = draw.CrossGlyph{}
		sc.GlyphStyle.Radius = vg.Points(5)
		p.Add(sc)
		p.Legend.Add("model states, estimate", sc)
	}
	if rep.DeviceBudget > 0 {
		b := float64(rep.DeviceBudget) / (1 << 20)
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: b}, {X: float64(len(rep.Variants)) - 0.5, Y: b}})
		if err != nil {
			return err
		}
		line.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("device budget", line)
	}
	// Head room for the legend above the tallest bar.
	top := float64(rep.DeviceBudget) / (1 << 20)
	for _, r := range rep.Variants {
		top = max(top, float64(r.PeakBytes["device"]["total"])/(1<<20), float64(r.Estimate)/(1<<20))
	}
	p.Y.Min, p.Y.Max = 0, top*1.75
	p.NominalX(names...)
	p.Legend.Top = true
	p.X.Tick.Label.Rotation = 0.4
	p.X.Tick.Label.XAlign = draw.XRight
	return p.Save(vg.Length(120+70*len(rep.Variants))*vg.Millimeter/4, 110*vg.Millimeter, path)
}
