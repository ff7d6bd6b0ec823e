package plot

import (
	"bytes"
	"image/png"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func chart() Chart {
	return Chart{Title: "gather, 8 ranks", XLabel: "message size (bytes)", YLabel: "bus bandwidth GB/s",
		Series: []Series{
			{Name: "gather", X: []float64{1024, 4096, 65536, 1 << 20}, Y: []float64{0.5, 1.5, 6, 12}},
			{Name: "scatter <b>", X: []float64{1024, 4096, 65536, 1 << 20}, Y: []float64{0.4, 1.1, 5, 9.5}},
		}}
}

func TestSVG(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Write(&b, "out.svg", chart()))
	s := b.String()
	require.True(t, strings.HasPrefix(s, "<svg"))
	require.Equal(t, 2, strings.Count(s, "<polyline"), "one line per series")
	require.Contains(t, s, "scatter &lt;b&gt;", "names are escaped")
	require.Contains(t, s, ">1M<", "log2 size ticks")
	require.Contains(t, s, ">64K<")
}

func TestPNG(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Write(&b, "out.PNG", chart()))
	img, err := png.Decode(&b)
	require.NoError(t, err)
	require.Equal(t, width, img.Bounds().Dx())
	// The series colour appears somewhere in the plot area.
	found := false
	want := parseHex(palette[0])
	for y := top; y < height-bottom && !found; y++ {
		for x := left; x < width-right; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(bl>>8) == want.B {
				found = true
				break
			}
		}
	}
	require.True(t, found, "first series drawn in the plot area")
}

func TestErrors(t *testing.T) {
	var b bytes.Buffer
	require.ErrorContains(t, Write(&b, "out.jpg", chart()), "unknown format")
	require.ErrorContains(t, Write(&b, "x.svg", Chart{}), "no points")
	c := chart()
	c.Series[0].Y = c.Series[0].Y[:1]
	require.ErrorContains(t, Write(&b, "x.svg", c), "has 4 x and 1 y")
	require.Equal(t, "4K", SizeLabel(4096))
	require.Equal(t, "2G", SizeLabel(2<<30))
	require.Equal(t, "100", SizeLabel(100))
}
