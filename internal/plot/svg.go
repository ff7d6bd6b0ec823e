package plot

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
)

// WriteSVG draws c as a standalone SVG document.
func WriteSVG(w io.Writer, c Chart) error {
	l, err := c.layout()
	if err != nil {
		return err
	}
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(c.Title))
	for _, x := range l.xTicks {
		xp := l.px(math.Exp2(x))
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xp, top, xp, height-bottom)
		p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xp, height-bottom+18, SizeLabel(math.Exp2(x)))
	}
	for _, y := range l.yTicks {
		yp := l.py(y)
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yp, width-right, yp)
		p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, yp+4, yLabel(y))
	}
	p(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>`+"\n", left, top, width-left-right, height-top-bottom)
	p(`<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (left+width-right)/2, height-20, html.EscapeString(c.XLabel))
	p(`<text transform="translate(20 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+height-bottom)/2, html.EscapeString(c.YLabel))
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		p(`<polyline fill="none" stroke="%s" stroke-width="2" points="`, col)
		for k := range s.X {
			if s.X[k] > 0 && !math.IsNaN(s.Y[k]) && !math.IsInf(s.Y[k], 0) {
				p("%.1f,%.1f ", l.px(s.X[k]), l.py(s.Y[k]))
			}
		}
		p(`"/>` + "\n")
		for k := range s.X {
			if s.X[k] > 0 && !math.IsNaN(s.Y[k]) && !math.IsInf(s.Y[k], 0) {
				p(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", l.px(s.X[k]), l.py(s.Y[k]), col)
			}
		}
		ly := top + 10 + 20*i
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", width-right+15, ly, width-right+40, ly, col)
		p(`<text x="%d" y="%d">%s</text>`+"\n", width-right+46, ly+4, html.EscapeString(s.Name))
	}
	p("</svg>\n")
	return b.Flush()
}
