package asym

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/mem"
)

// Buf describes one collective buffer of a rank: its memory type and its layout in
// elements. A plain buffer has Count elements. A v-layout buffer (gatherv's and
// allgatherv's destination, scatterv's source, both buffers of alltoallv) has, for each
// rank i, Counts[i] elements at element offset Displs[i]; its Count is ignored. An
// in-place buffer is described whole (an in-place allgather's Dst holds every rank's
// block).
type Buf struct {
	Type   mem.Type
	Count  int
	Counts []int
	Displs []int
}

// Args are one rank's arguments of a collective, as far as staging is concerned.
// Fields that the collective does not read on this rank are ignored: the destination of
// a bcast and of a gather's non-root, Root of a non-rooted collective, DtypeSize of a
// barrier, the source of an in-place collective, InPlace on non-roots and in bcast.
type Args struct {
	Coll      collective.Type
	Root      int
	Rank      int
	Size      int
	Src       Buf
	Dst       Buf
	DtypeSize int
	InPlace   bool
}

// Span is a byte range of a buffer: Len bytes at offset Off.
type Span struct{ Off, Len int }

// Scratch is the plan for one user buffer. When Needed, the transport uses a scratch
// buffer of Type and Bytes in place of the user's buffer. The scratch has the user
// buffer's layout: byte b of the scratch stands for byte b of the user's buffer. CopyIn
// copies the user's bytes into the scratch at every post, CopyOut copies the scratch into
// the user's buffer after every successful completion; both copy only Spans, the bytes the
// collective reads or writes, so the gaps of a v-layout stay the user's.
type Scratch struct {
	Needed  bool
	Type    mem.Type
	Bytes   int
	CopyIn  bool
	CopyOut bool
	Spans   []Span
}

// Staging is one rank's plan for its two buffers.
type Staging struct{ Src, Dst Scratch }

// Any reports whether either buffer is staged.
func (s Staging) Any() bool { return s.Src.Needed || s.Dst.Needed }

func (s Scratch) String() string {
	if !s.Needed {
		return "user"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v scratch, %d B", s.Type, s.Bytes)
	if s.CopyIn {
		b.WriteString(", copy-in")
	}
	if s.CopyOut {
		b.WriteString(", copy-out")
	}
	return b.String()
}

func (s Staging) String() string { return "src: " + s.Src.String() + "; dst: " + s.Dst.String() }

// directions returns how the collective uses each buffer on this rank, from the
// collective's row of the table; zero means the buffer is not used, and then its fields
// are ignored. The error is an unknown collective.
func (a *Args) directions() (src, dst collective.Dir, d *collective.Desc) {
	d = collective.Describe(a.Coll)
	if d == nil {
		return 0, 0, nil
	}
	sd := d.Side(a.Rank, a.Root)
	if a.InPlace && d.InPlace && sd == &d.Root {
		return sd.InPlaceSrc.Dir, sd.InPlaceDst.Dir, d
	}
	return sd.Src.Dir, sd.Dst.Dir, d
}

// Plan decides one rank's staging from its own arguments and its own node's reach. It
// needs nothing from other ranks, and it does nothing: see the package documentation for
// the rules.
func Plan(a Args, r mem.Reach) (Staging, error) {
	var s Staging
	if err := PlanInto(&s, a, r); err != nil {
		return Staging{}, err
	}
	return s, nil
}

// PlanInto is Plan writing its plan into *s: the plan's Spans take the backing arrays
// of the Spans that *s held, so a caller that keeps its Staging and plans the same
// collective again allocates nothing. On error *s holds no plan (nothing staged).
func PlanInto(s *Staging, a Args, r mem.Reach) error {
	if s == nil {
		return invalid("PlanInto: nil Staging")
	}
	srcSpans, dstSpans := s.Src.Spans[:0], s.Dst.Spans[:0]
	*s = Staging{Src: Scratch{Spans: srcSpans}, Dst: Scratch{Spans: dstSpans}}
	srcDir, dstDir, d := a.directions()
	if d == nil {
		return invalid("Args.Coll is unknown (%d)", uint8(a.Coll))
	}
	if err := a.validate(d, srcDir, dstDir); err != nil {
		return err
	}
	// reachable: a reduction reads and writes its buffers with the CPU, but a
	// read-only source may be of a type that the transport copies in itself
	// (Reach.ReduceSrc), where it takes mixed types (the source's type then need not
	// be the destination's).
	reachable := func(t mem.Type, dir collective.Dir) bool {
		switch {
		case !d.Reduction:
			return r.NICReaches(t)
		case dir == collective.In && r.Mixed:
			return r.ReducesFrom(t)
		}
		return r.NICReaches(t) && r.CPUReaches(t)
	}
	// want is the type the transport must see for each buffer; a buffer whose want
	// differs from its own type is staged.
	want := func(t mem.Type, dir collective.Dir) mem.Type {
		if reachable(t, dir) {
			return t
		}
		return mem.Host
	}
	srcWant, dstWant := want(a.Src.Type, srcDir), want(a.Dst.Type, dstDir)
	if !r.Mixed && srcDir != 0 && dstDir != 0 && a.Src.Type != a.Dst.Type {
		// Asymmetric, on a transport that takes one memory type per collective (the
		// seed's rule): the replaced buffer takes the type that the kept buffer has
		// on the wire, never a second staging.
		if d.ReplacesSrc {
			srcWant = dstWant
		} else {
			dstWant = srcWant
		}
	}
	if srcDir != 0 {
		s.Src = a.scratch(a.Src, isV(d, a, true), srcDir, srcWant, srcSpans)
	}
	if dstDir != 0 {
		s.Dst = a.scratch(a.Dst, isV(d, a, false), dstDir, dstWant, dstSpans)
	}
	return nil
}

// isV reports whether the buffer has a v-layout on this rank.
func isV(d *collective.Desc, a Args, src bool) bool {
	sd := d.Side(a.Rank, a.Root)
	if src {
		return sd.Src.Extent == collective.V || sd.InPlaceSrc.Extent == collective.V
	}
	return sd.Dst.Extent == collective.V || sd.InPlaceDst.Extent == collective.V
}

// scratch plans one validated buffer, its spans in spans' backing array (empty), which
// a buffer that is not staged keeps too.
func (a *Args) scratch(b Buf, v bool, d collective.Dir, want mem.Type, spans []Span) Scratch {
	if want == b.Type {
		return Scratch{Spans: spans}
	}
	extent := 0
	if v {
		for i, n := range b.Counts {
			// An empty block's displacement is not part of the buffer (as in
			// collective.Layout): it may point anywhere.
			if n > 0 {
				extent = max(extent, b.Displs[i]+n)
				spans = append(spans, Span{b.Displs[i] * a.DtypeSize, n * a.DtypeSize})
			}
		}
		spans = mergeSpans(spans)
	} else {
		extent = b.Count
		if extent > 0 {
			spans = append(spans, Span{0, extent * a.DtypeSize})
		}
	}
	if len(spans) == 0 {
		return Scratch{Spans: spans}
	}
	return Scratch{
		Needed:  true,
		Type:    want,
		Bytes:   extent * a.DtypeSize,
		CopyIn:  d&collective.In != 0,
		CopyOut: d&collective.Out != 0,
		Spans:   spans,
	}
}

// mergeSpans sorts spans and joins those that overlap or touch.
func mergeSpans(spans []Span) []Span {
	slices.SortFunc(spans, func(x, y Span) int { return x.Off - y.Off })
	out := spans[:0]
	for _, s := range spans {
		if n := len(out); n > 0 && s.Off <= out[n-1].Off+out[n-1].Len {
			out[n-1].Len = max(out[n-1].Len, s.Off+s.Len-out[n-1].Off)
			continue
		}
		out = append(out, s)
	}
	return out
}

func invalid(format string, args ...any) error {
	return &argError{"asym: " + fmt.Sprintf(format, args...)}
}

// validate checks what Plan reads, and only that.
func (a *Args) validate(d *collective.Desc, srcDir, dstDir collective.Dir) error {
	if a.Size < 1 {
		return invalid("Args.Size is %d, want at least 1", a.Size)
	}
	if a.Rank < 0 || a.Rank >= a.Size {
		return invalid("Args.Rank is %d, want [0, %d)", a.Rank, a.Size)
	}
	if d.Rooted && (a.Root < 0 || a.Root >= a.Size) {
		return invalid("Args.Root is %d, want [0, %d)", a.Root, a.Size)
	}
	if srcDir == 0 && dstDir == 0 {
		return nil
	}
	switch a.DtypeSize {
	case 1, 2, 4, 8, 16:
	default:
		return invalid("Args.DtypeSize is %d, want 1, 2, 4, 8 or 16", a.DtypeSize)
	}
	if srcDir != 0 {
		if err := a.validateBuf("Src", a.Src, isV(d, *a, true)); err != nil {
			return err
		}
	}
	if dstDir != 0 {
		return a.validateBuf("Dst", a.Dst, isV(d, *a, false))
	}
	return nil
}

func (a *Args) validateBuf(name string, b Buf, v bool) error {
	if _, err := mem.ParseType(b.Type.String()); err != nil {
		return invalid("Args.%s.Type is unknown (%d)", name, uint8(b.Type))
	}
	limit := math.MaxInt / a.DtypeSize // largest element extent whose byte size fits an int
	if !v {
		if b.Count < 0 {
			return invalid("Args.%s.Count is negative (%d)", name, b.Count)
		}
		if b.Count > limit {
			return invalid("Args.%s.Count is %d: %d-byte elements overflow int", name, b.Count, a.DtypeSize)
		}
		return nil
	}
	if len(b.Counts) != a.Size {
		return invalid("Args.%s.Counts has %d entries, want Args.Size (%d)", name, len(b.Counts), a.Size)
	}
	if len(b.Displs) != a.Size {
		return invalid("Args.%s.Displs has %d entries, want Args.Size (%d)", name, len(b.Displs), a.Size)
	}
	for i, n := range b.Counts {
		d := b.Displs[i]
		switch {
		case n < 0:
			return invalid("Args.%s.Counts[%d] is negative (%d)", name, i, n)
		case d < 0:
			return invalid("Args.%s.Displs[%d] is negative (%d)", name, i, d)
		case n == 0:
			// An empty block's displacement is no part of the buffer: anything goes.
		case n > limit-d:
			return invalid("Args.%s.Displs[%d] + Counts[%d] is %d + %d: %d-byte elements overflow int",
				name, i, i, d, n, a.DtypeSize)
		}
	}
	return nil
}
