package asym

import (
	"slices"

	"github.com/ibcoll/ibcoll/mem"
)

// Rows: an output that lands as one block per sender (a gather root's destination, an
// allgather's, an alltoall's) fills its blocks side by side, each from its start on,
// in landing pieces: the first pieces of several blocks land before any block is whole,
// so runs of adjacent landed bytes (Landed's rule) reach a copy's worth only when whole
// blocks have. A copy of rows copies the same range of several blocks at once as one
// mem.Copy2DAsync, which the copy engine runs as one copy of all those bytes (one
// driver call instead of one per block), so the copy-out starts once a copy's worth of
// first pieces has landed (docs/design.md, "Rows", has the traces).

// maxRows bounds the blocks a stage follows as rows: each report walks them all, and a
// larger team's blocks come in subtrees (k-nomial), whose runs are adjacent anyway.
const maxRows = 64

// SetRows tells the stage that its output lands as rows blocks of pitch bytes, block r
// at r*pitch and filled from its start on, in order. It holds until the next Init; it
// has no effect unless the output is staged, copies out, and its spans are exactly the
// rows' bytes, with 2 to maxRows rows. Call it before the first post.
func (s *Stage) SetRows(pitch, rows int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rowPitch, s.rowCount = 0, 0
	sd := s.outSide()
	if pitch <= 0 || rows < 2 || rows > maxRows || sd.scratch == nil || !sd.plan.CopyOut ||
		len(sd.plan.Spans) != 1 || sd.plan.Spans[0] != (Span{Off: 0, Len: pitch * rows}) {
		return
	}
	s.rowPitch, s.rowCount = pitch, rows
	s.fronts = grow(s.fronts, rows)
	s.avail = grow(s.avail, rows)
	s.bars = slices.Grow(s.bars[:0], rows)
}

// queueRows queues, while one reaches batchMin bytes, the copy-out of the largest
// rectangle of landed bytes: consecutive rows whose queued prefixes (fronts) are
// equal, each with a landed range from its front on, as wide as the narrowest of them.
// A row whose next bytes have not landed ends a rectangle; what no rectangle takes is
// left to Complete, as the runs of Landed's rule are.
func (s *Stage) queueRows(sd *side) {
	for sd.lateEr == nil {
		s.measureRows(sd)
		lo, n, w := s.bestRect()
		if n == 0 || w*n < s.batchMin {
			return
		}
		off := lo*s.rowPitch + s.fronts[lo]
		if !s.queueRect(sd, off, w, n) {
			return
		}
		for r := lo; r < lo+n; r++ {
			s.fronts[r] += w
		}
		out := cutRows(s.cut[:0], sd.pend, off, w, s.rowPitch, n)
		s.cut, sd.pend = sd.pend[:0], out // the two lists trade backing arrays: no allocation once grown
	}
}

// measureRows sets avail[r] to the landed bytes from row r's front on, within the row.
func (s *Stage) measureRows(sd *side) {
	clear(s.avail)
	p := s.rowPitch
	for _, sp := range sd.pend {
		end := sp.Off + sp.Len
		for r := sp.Off / p; r < s.rowCount && r*p < end; r++ {
			start := r*p + s.fronts[r]
			if s.fronts[r] < p && sp.Off <= start && start < end {
				s.avail[r] = min(end, (r+1)*p) - start
			}
		}
	}
}

// bestRect returns the rectangle of most bytes: first row, rows, width. Rectangles
// span consecutive rows with equal fronts, each with bytes to copy, as wide as the
// narrowest: the largest rectangle under the histogram of avail (the one of more rows
// among equals), found with a stack of rising bars, in one pass over the rows.
func (s *Stage) bestRect() (lo, n, w int) {
	best := 0
	stk := s.bars[:0]
	pop := func(end, h int) int { // pops the bars not lower than h; returns where h's bar starts
		start := end
		for len(stk) > 0 && stk[len(stk)-1].h >= h {
			b := stk[len(stk)-1]
			stk = stk[:len(stk)-1]
			// on a tie, more rows: fronts that stay equal make wider rectangles later
			if a := b.h * (end - b.start); a > best || a == best && end-b.start > n {
				best, lo, n, w = a, b.start, end-b.start, b.h
			}
			start = b.start
		}
		return start
	}
	for r := 0; r < s.rowCount; r++ {
		if r > 0 && s.fronts[r] != s.fronts[r-1] {
			pop(r, 0) // rows at another front start a new run
		}
		h := s.avail[r]
		start := pop(r, h)
		if h > 0 {
			stk = append(stk, bar{start: start, h: h})
		}
	}
	pop(s.rowCount, 0)
	s.bars = stk
	return lo, n, w
}

// bar is a rising bar of bestRect's stack: rows from start on have at least h bytes.
type bar struct{ start, h int }

// queueRect queues the copy-out of n rows of w bytes from off on, one pitch apart, and
// reports whether it did.
func (s *Stage) queueRect(sd *side, off, w, n int) bool {
	if !s.copyStream(sd) {
		return false
	}
	u, sc, p := sd.user, sd.outBuf(), s.rowPitch
	s.tr.mark('q', off, w*n)
	var err error
	if u.Buf != nil {
		err = mem.Copy2DAsync(sd.stream, u.Buf, off, sc, off, w, p, n)
	} else {
		err = mem.CopyPtr2DAsync(sd.stream, u.Addr+uintptr(off), u.Type, sc.Addr()+uintptr(off), sc.Type(), w, p, n)
	}
	if err != nil {
		sd.lateEr = err // Complete copies what was not queued: nothing is lost
		return false
	}
	s.tr.mark('Q', off, w*n)
	for r := 0; r < n; r++ {
		sd.early = append(sd.early, Span{Off: off + r*p, Len: w})
	}
	sd.landed = true
	if n > 1 {
		sd.rowCopies++
	}
	s.copied.Add(int64(w * n))
	return true
}

// cutRows appends to out what is left of spans (sorted, disjoint) without the n ranges
// of w bytes from off on, one pitch apart, each inside one span.
func cutRows(out, spans []Span, off, w, pitch, n int) []Span {
	r := 0
	for _, sp := range spans {
		for r < n && off+r*pitch < sp.Off+sp.Len && off+r*pitch >= sp.Off {
			lo := off + r*pitch
			if lo > sp.Off {
				out = append(out, Span{Off: sp.Off, Len: lo - sp.Off})
			}
			sp = Span{Off: lo + w, Len: sp.Off + sp.Len - lo - w}
			r++
		}
		if sp.Len > 0 {
			out = append(out, sp)
		}
	}
	return out
}

// grow returns n zeros in l's backing array when it holds them, else in a new one.
func grow(l []int, n int) []int {
	if cap(l) < n {
		return make([]int, n)
	}
	l = l[:n]
	clear(l)
	return l
}
