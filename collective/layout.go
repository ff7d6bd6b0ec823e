package collective

import (
	"fmt"
	"strconv"
)

// Buf is one buffer's element layout as the caller gave it: Count for plain buffers,
// Counts and Displs (one entry per rank) for v-layouts.
type Buf struct {
	Count  int
	Counts []int
	Displs []int
}

// Args are what Layout needs of one rank's arguments.
type Args struct {
	Rank, Size, Root int
	InPlace          bool
	DTypeSize        int
	Src, Dst         Buf
}

// BufLayout is one buffer as the collective uses it on this rank.
type BufLayout struct {
	Use
	// Elems is the extent in elements: the buffer must hold Elems × the element size
	// bytes (for a v-layout, the largest Displs[i]+Counts[i] with Counts[i] > 0).
	Elems int
	// Count, Counts and Displs are the caller's, for the buffer's extent kind.
	Count          int
	Counts, Displs []int
}

// Bytes is the extent in bytes.
func (b BufLayout) Bytes(dtSize int) int { return b.Elems * dtSize }

// MaxBytes bounds the bytes of one buffer of a collective: 1 TiB, more than any one
// process registers, and far below where a byte count overflows an int. Layout
// refuses larger extents (and team size × Count beyond it) before anything is built,
// so a wrong count fails at once instead of making a transport describe petabytes.
const MaxBytes = 1 << 40

// Layout is one rank's view of a collective.
type Layout struct {
	Src, Dst BufLayout
	// InPlace is whether the in-place form applies on this rank.
	InPlace bool
	// Block is the element count every rank agrees on, -1 for v-collectives.
	Block int
}

// Agreed is what every rank of the team must have alike, besides the type, root,
// dtype and op: the block, "v", or "" for a barrier. It is made when asked for, so
// that a Layout costs no allocation.
func (l Layout) Agreed() string {
	switch {
	case !l.Src.Used() && !l.Dst.Used():
		return ""
	case l.Block >= 0:
		return strconv.Itoa(l.Block)
	}
	return "v"
}

// Layout checks a's buffer description against the row of c and returns the extents
// the collective uses on this rank. Buffers the collective does not touch on this
// rank are not looked at. Errors name the argument (Args.Dst.Count, ...).
func (c Type) Layout(a Args) (Layout, error) {
	var l Layout
	d := Describe(c)
	if d == nil {
		return l, invalidf("Args.Type is not a valid collective (%d)", uint8(c))
	}
	if a.Size < 1 || a.Rank < 0 || a.Rank >= a.Size {
		return l, invalidf("rank %d of %d is not a rank of the team", a.Rank, a.Size)
	}
	if d.Rooted && (a.Root < 0 || a.Root >= a.Size) {
		return l, invalidf("Args.Root is %d, want [0, %d)", a.Root, a.Size)
	}
	dt := max(a.DTypeSize, 1)
	s := d.Side(a.Rank, a.Root)
	l.InPlace = a.InPlace && d.InPlace && s == &d.Root
	l.Src.Use, l.Dst.Use = s.Src, s.Dst
	if l.InPlace {
		l.Src.Use, l.Dst.Use = s.InPlaceSrc, s.InPlaceDst
	}
	where := ""
	if d.Rooted {
		where = " on the root"
		if a.Rank != a.Root {
			where = ""
		}
	}
	n := a.Size
	var err error
	l.Block = -1
	// The buffer that fixes the block: a Block buffer, else the destination.
	ref, refName, other, otherName := &l.Src, "Src", &l.Dst, "Dst"
	refArg, otherArg := a.Src, a.Dst
	if l.Src.Extent != Block && l.Dst.Used() {
		ref, refName, other, otherName = &l.Dst, "Dst", &l.Src, "Src"
		refArg, otherArg = a.Dst, a.Src
	}
	if err = fill(ref, refName, refArg, n, dt); err != nil {
		return l, err
	}
	if err = fill(other, otherName, otherArg, n, dt); err != nil {
		return l, err
	}
	if ref.Extent == Block && other.Extent == Blocks && ref.Count > MaxBytes/dt/n {
		return l, invalidf("Args.%s.Count is %d%s: team size × Args.%s.Count (%d × %d) of %d-byte elements exceeds the %d bytes a buffer may have (collective.MaxBytes)",
			refName, ref.Count, where, refName, n, ref.Count, dt, MaxBytes)
	}
	switch ref.Extent {
	case Block:
		l.Block = ref.Count
	case Blocks:
		if ref.Count%n != 0 {
			return l, invalidf("Args.%s.Count is %d%s, not a multiple of the team size %d", refName, ref.Count, where, n)
		}
		l.Block = ref.Count / n
	}
	if l.Block >= 0 && other.Used() {
		want := l.Block
		if other.Extent == Blocks {
			want = n * l.Block
		}
		if other.Count != want {
			rel := fmt.Sprintf("Args.%s.Count = %d", refName, want)
			if other.Extent == Blocks && ref.Extent == Block {
				rel = fmt.Sprintf("team size × Args.%s.Count = %d", refName, want)
			}
			return l, invalidf("Args.%s.Count is %d%s, want %s", otherName, other.Count, where, rel)
		}
	}
	// A rank's own count must match its entry of its v-layout buffer.
	if v, own, vName, ownName := vAndOwn(&l); v != nil && own != nil && own.Count != v.Counts[a.Rank] {
		return l, invalidf("Args.%s.Count is %d%s, Args.%s.Counts[%d] is %d: they must match",
			ownName, own.Count, where, vName, a.Rank, v.Counts[a.Rank])
	}
	return l, nil
}

// fill reads one buffer's extent from the caller's description.
func fill(b *BufLayout, name string, a Buf, n, dt int) error {
	limit := MaxBytes / dt
	switch b.Extent {
	case Unused:
		return nil
	case V:
		if len(a.Counts) != n || len(a.Displs) != n {
			return invalidf("Args.%s.Counts and Displs need %d entries (the team size), have %d and %d",
				name, n, len(a.Counts), len(a.Displs))
		}
		for i, c := range a.Counts {
			d := a.Displs[i]
			switch {
			case c < 0 || d < 0:
				return invalidf("Args.%s.Counts[%d] or Displs[%d] is negative (%d, %d)", name, i, i, c, d)
			case c == 0:
				// An empty block's displacement is no part of the buffer: anything goes.
			case c > limit || d > limit-c:
				return invalidf("Args.%s.Displs[%d] + Counts[%d] is %d + %d: %d-byte elements exceed the %d bytes a buffer may have (collective.MaxBytes)",
					name, i, i, d, c, dt, MaxBytes)
			default:
				b.Elems = max(b.Elems, d+c)
			}
		}
		if b.Dir&Out != 0 {
			if i, j, shared := sharedBlocks(a.Counts, a.Displs); shared {
				return invalidf("Args.%s blocks %d and %d share elements (Displs %d and %d, Counts %d and %d): the blocks of an output must not overlap",
					name, i, j, a.Displs[i], a.Displs[j], a.Counts[i], a.Counts[j])
			}
		}
		b.Counts, b.Displs = a.Counts, a.Displs
		return nil
	}
	if a.Count < 0 {
		return invalidf("Args.%s.Count is negative (%d)", name, a.Count)
	}
	if a.Count > limit {
		return invalidf("Args.%s.Count is %d: %d-byte elements exceed the %d bytes a buffer may have (collective.MaxBytes)", name, a.Count, dt, MaxBytes)
	}
	b.Count, b.Elems = a.Count, a.Count
	return nil
}

func vAndOwn(l *Layout) (v, own *BufLayout, vName, ownName string) {
	switch {
	case l.Src.Extent == V && l.Dst.Extent == Own:
		return &l.Src, &l.Dst, "Src", "Dst"
	case l.Dst.Extent == V && l.Src.Extent == Own:
		return &l.Dst, &l.Src, "Dst", "Src"
	}
	return nil, nil, "", ""
}
