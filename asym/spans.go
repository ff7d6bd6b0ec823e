package asym

import (
	"slices"

	"github.com/ibcoll/ibcoll/mem"
)

func isCUDA(t mem.Type) bool { return t == mem.CUDA || t == mem.CUDAManaged }

// intersect appends to out the parts of spans that lie inside w.
func intersect(out, spans []Span, w Span) []Span {
	for _, sp := range spans {
		lo, hi := max(sp.Off, w.Off), min(sp.Off+sp.Len, w.Off+w.Len)
		if lo < hi {
			out = append(out, Span{Off: lo, Len: hi - lo})
		}
	}
	return out
}

// coalesce sorts spans by offset and joins each run of ranges that touch end to
// start, in place, and returns the joined prefix. Overlapping ranges stay apart: a
// range reported twice is copied twice, as the stage counts it.
func coalesce(spans []Span) []Span {
	if len(spans) < 2 {
		return spans
	}
	slices.SortStableFunc(spans, func(a, b Span) int { return a.Off - b.Off })
	out := spans[:1]
	for _, sp := range spans[1:] {
		if last := &out[len(out)-1]; sp.Off == last.Off+last.Len {
			last.Len += sp.Len
			continue
		}
		out = append(out, sp)
	}
	return out
}

// minus appends to out the parts of spans that no span of cut covers, in order; it
// sorts cut in place. Both lists are short (a few ranges per rank), so the quadratic
// walk costs less than merging.
func minus(out, spans, cut []Span) []Span {
	if len(cut) == 0 {
		return append(out, spans...)
	}
	c := cut
	slices.SortFunc(c, func(a, b Span) int { return a.Off - b.Off })
	for _, sp := range spans {
		lo, hi := sp.Off, sp.Off+sp.Len
		for _, x := range c {
			xlo, xhi := x.Off, x.Off+x.Len
			if xhi <= lo || xlo >= hi {
				continue
			}
			if xlo > lo {
				out = append(out, Span{Off: lo, Len: xlo - lo})
			}
			lo = max(lo, xhi)
			if lo >= hi {
				break
			}
		}
		if lo < hi {
			out = append(out, Span{Off: lo, Len: hi - lo})
		}
	}
	return out
}
