// Package plot draws the one chart ibcoll's tools need: bandwidth against
// message size on a log2 axis, one line per series, as SVG or PNG. It is
// small on purpose; the data it gets is a handful of points per line.
package plot

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
)

// Series is one line of the chart.
type Series struct {
	Name string
	X    []float64 // message size in bytes, > 0
	Y    []float64 // bandwidth, same length as X
}

// Chart is what to draw.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	Series []Series
}

const (
	width, height = 960, 540
	left, right   = 80, 200
	top, bottom   = 50, 70
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// layout maps data to pixels and picks the ticks.
type layout struct {
	x0, x1, y1 float64 // log2 x range, y max
	xTicks     []float64
	yTicks     []float64
}

func (c *Chart) layout() (layout, error) {
	var l layout
	l.x0, l.x1 = math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return l, fmt.Errorf("plot: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i, x := range s.X {
			if x <= 0 || math.IsNaN(s.Y[i]) || math.IsInf(s.Y[i], 0) {
				continue
			}
			lx := math.Log2(x)
			l.x0, l.x1 = math.Min(l.x0, lx), math.Max(l.x1, lx)
			l.y1 = math.Max(l.y1, s.Y[i])
			n++
		}
	}
	if n == 0 {
		return l, errors.New("plot: no points to draw")
	}
	l.x0, l.x1 = math.Floor(l.x0), math.Ceil(l.x1)
	if l.x1 == l.x0 {
		l.x0, l.x1 = l.x0-1, l.x1+1
	}
	step := math.Max(1, math.Ceil((l.x1-l.x0)/12))
	for x := l.x0; x <= l.x1+1e-9; x += step {
		l.xTicks = append(l.xTicks, x)
	}
	if l.y1 <= 0 {
		l.y1 = 1
	}
	ys := niceStep(l.y1 / 5)
	l.y1 = math.Ceil(l.y1*1.05/ys) * ys
	for y := 0.0; y <= l.y1+ys/2; y += ys {
		l.yTicks = append(l.yTicks, y)
	}
	return l, nil
}

func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func (l layout) px(x float64) float64 {
	return left + (math.Log2(x)-l.x0)/(l.x1-l.x0)*(width-left-right)
}

func (l layout) py(y float64) float64 {
	return height - bottom - y/l.y1*(height-top-bottom)
}

// SizeLabel prints a byte count the way the tools print sizes: 4K, 1M, 2G.
func SizeLabel(b float64) string {
	switch {
	case b >= 1<<30 && math.Mod(b, 1<<30) == 0:
		return fmt.Sprintf("%gG", b/(1<<30))
	case b >= 1<<20 && math.Mod(b, 1<<20) == 0:
		return fmt.Sprintf("%gM", b/(1<<20))
	case b >= 1<<10 && math.Mod(b, 1<<10) == 0:
		return fmt.Sprintf("%gK", b/(1<<10))
	}
	return fmt.Sprintf("%g", b)
}

func yLabel(y float64) string { return strings.TrimSuffix(fmt.Sprintf("%.3g", y), ".0") }

// Write draws c to w in the format named by the file name's extension
// (.svg or .png).
func Write(w io.Writer, file string, c Chart) error {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg":
		return WriteSVG(w, c)
	case ".png":
		return WritePNG(w, c)
	}
	return fmt.Errorf("plot: %q: unknown format, want a .svg or .png file", file)
}
