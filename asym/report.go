package asym

import (
	"fmt"

	"github.com/ibcoll/ibcoll/mem"
)

// SideReport says how one user buffer goes through the collective.
type SideReport struct {
	Staged  bool
	User    mem.Type // the user's memory type
	Scratch mem.Type // the scratch's, when Staged
	Bytes   int      // scratch size
	CopyIn  bool
	CopyOut bool
	Pinned  bool // the host scratch is page-locked for the copy engine
	Beside  bool // the copy-in runs beside the wire, in chunks
	Chunk   int  // the size of those chunks, when Beside
	Landed  bool // blocks were copied out as they landed
	// RowCopies counts the copies of the same range of several blocks at once
	// (SetRows), over all posts.
	RowCopies int64
	// Alternate: the transport held the output in two buffers of its own, one per
	// post parity, so that peers write a post before it starts (SetOutput); Pinned
	// then says whether those are pinned.
	Alternate bool
	Note      string // why a host scratch beside CUDA memory is not pinned
	// Unused: the collective does not touch this buffer on this rank (a scatter's
	// Src off the root, a bcast's Dst). A Stage does not know; coll's Request.Staging
	// says so.
	Unused bool
}

// Report is what a Stage did: how each side is staged, and the bytes its copies moved
// over all posts so far (copy-in and copy-out, early ones included).
type Report struct {
	Src, Dst SideReport
	Posts    int
	Copied   int64
}

// Report returns the stage's decisions and its counts so far. It is the zero Report
// for a nil Stage.
func (s *Stage) Report() Report {
	if s == nil {
		return Report{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Report{Posts: s.posts, Copied: s.copied.Load()}
	for i, out := range []*SideReport{&r.Src, &r.Dst} {
		sd := &s.sides[i]
		*out = SideReport{User: sd.user.Type, Staged: sd.plan.Needed}
		if sd.plan.Needed {
			out.Scratch, out.Bytes = sd.plan.Type, sd.plan.Bytes
			out.CopyIn, out.CopyOut = sd.plan.CopyIn, sd.plan.CopyOut
			out.Pinned = sd.scratch != nil && sd.scratch.Pinned()
			if sd.alternate {
				out.Pinned = sd.outPinned
			}
			out.Alternate = sd.alternate
			out.Beside = i == 0 && sd.pipelined()
			if out.Beside {
				out.Chunk = pipeChunkFor(sd.copyInBytes())
			}
			out.Landed = sd.landed
			out.RowCopies = sd.rowCopies
			out.Note = sd.pinNote
		}
	}
	return r
}

// String says, for people, how a side is staged: "cuda via pinned host scratch, copy-in,
// copy-out as blocks land", "host direct", or "unused".
func (r SideReport) String() string {
	if r.Unused {
		return "unused"
	}
	if !r.Staged {
		return fmt.Sprintf("%v direct", r.User)
	}
	how := r.Scratch.String()
	if r.Scratch == mem.Host && isCUDA(r.User) {
		if r.Pinned {
			how = "pinned host"
		} else {
			how = "pageable host"
		}
	}
	s := fmt.Sprintf("%v via %s scratch (%d B", r.User, how, r.Bytes)
	if r.CopyIn {
		s += ", copy-in at post"
		if r.Beside {
			s += fmt.Sprintf(" in chunks of %s beside the wire", sizeString(r.Chunk))
		}
	}
	switch {
	case r.CopyOut && r.Landed && r.RowCopies == 1:
		s += ", copy-out as blocks land, 1 copy of several blocks at once"
	case r.CopyOut && r.Landed && r.RowCopies > 1:
		s += fmt.Sprintf(", copy-out as blocks land, %d copies of several blocks at once", r.RowCopies)
	case r.CopyOut && r.Landed:
		s += ", copy-out as blocks land"
	case r.CopyOut:
		s += ", copy-out at completion"
	}
	if r.Alternate {
		s += ", from the transport's two buffers, written a post ahead"
	}
	s += ")"
	if r.Note != "" {
		s += ": not pinned: " + r.Note
	}
	return s
}

// sizeString writes n bytes in the largest binary unit that divides it.
func sizeString(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
