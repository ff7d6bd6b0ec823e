package plot

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// WritePNG draws c as a PNG image.
func WritePNG(w io.Writer, c Chart) error {
	l, err := c.layout()
	if err != nil {
		return err
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	grid, black := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}, color.RGBA{0, 0, 0, 0xff}
	text := func(x, y int, s string, anchor int) { // anchor: 0 left, 1 middle, 2 right
		d := &font.Drawer{Dst: img, Src: image.NewUniform(black), Face: basicfont.Face7x13}
		wd := d.MeasureString(s).Round()
		d.Dot = fixed.P(x-anchor*wd/2, y)
		d.DrawString(s)
	}
	for _, x := range l.xTicks {
		xp := l.px(math.Exp2(x))
		line(img, xp, top, xp, height-bottom, 1, grid)
		text(int(xp), height-bottom+18, SizeLabel(math.Exp2(x)), 1)
	}
	for _, y := range l.yTicks {
		yp := l.py(y)
		line(img, left, yp, width-right, yp, 1, grid)
		text(left-8, int(yp)+4, yLabel(y), 2)
	}
	for _, seg := range [][4]float64{{left, top, width - right, top}, {left, height - bottom, width - right, height - bottom},
		{left, top, left, height - bottom}, {width - right, top, width - right, height - bottom}} {
		line(img, seg[0], seg[1], seg[2], seg[3], 1, black)
	}
	text(left, 18, c.Title, 0)
	text((left+width-right)/2, height-20, c.XLabel, 1)
	text(8, top-6, c.YLabel, 0)
	for i, s := range c.Series {
		col := parseHex(palette[i%len(palette)])
		var px, py float64
		first := true
		for k := range s.X {
			if s.X[k] <= 0 || math.IsNaN(s.Y[k]) || math.IsInf(s.Y[k], 0) {
				continue
			}
			x, y := l.px(s.X[k]), l.py(s.Y[k])
			if !first {
				line(img, px, py, x, y, 2, col)
			}
			dot(img, x, y, 3, col)
			px, py, first = x, y, false
		}
		ly := float64(top + 10 + 20*i)
		line(img, width-right+15, ly, width-right+40, ly, 3, col)
		text(width-right+46, int(ly)+4, s.Name, 0)
	}
	return png.Encode(w, img)
}

func parseHex(s string) color.RGBA {
	v, _ := strconv.ParseUint(s[1:], 16, 32)
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 0xff}
}

// line draws a segment of the given thickness by stamping squares along it.
func line(img *image.RGBA, x0, y0, x1, y1 float64, thick int, c color.RGBA) {
	steps := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for i := 0; i <= steps; i++ {
		t := float64(i) / float64(steps)
		x, y := int(math.Round(x0+(x1-x0)*t)), int(math.Round(y0+(y1-y0)*t))
		for dx := 0; dx < thick; dx++ {
			for dy := 0; dy < thick; dy++ {
				img.SetRGBA(x+dx-thick/2, y+dy-thick/2, c)
			}
		}
	}
}

func dot(img *image.RGBA, cx, cy, r float64, c color.RGBA) {
	for y := -r; y <= r; y++ {
		for x := -r; x <= r; x++ {
			if x*x+y*y <= r*r {
				img.SetRGBA(int(cx+x), int(cy+y), c)
			}
		}
	}
}
