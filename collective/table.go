package collective

// Dir says how a collective uses one buffer on one rank.
type Dir uint8

const (
	// In: the collective reads the buffer (a staged copy of it is filled at post).
	In Dir = 1 << iota
	// Out: the collective writes the buffer (a staged copy of it is copied out at
	// completion).
	Out
)

// Extent says what a buffer's element count is, relative to the block that every rank
// of the collective agrees on.
type Extent uint8

const (
	// Unused: the collective does not touch the buffer on this rank.
	Unused Extent = iota
	// Block: Count is the block.
	Block
	// Blocks: Count is team size × the block, rank i's block at i × block.
	Blocks
	// Own: Count is this rank's own number of elements, which may differ from rank to
	// rank (the plain side of a v-collective). Where the same rank also has the
	// v-layout buffer, it must equal that buffer's Counts[rank].
	Own
	// V: Counts and Displs, one entry per rank, in elements.
	V
)

// Use is how a collective uses one buffer of one rank.
type Use struct {
	Extent Extent
	Dir    Dir
}

// Used reports whether the buffer is touched at all.
func (u Use) Used() bool { return u.Extent != Unused }

// Side is how one rank uses its two buffers, normally and in place. A rooted collective
// has one Side for its root and one for the other ranks; a non-rooted one the same for
// everyone.
type Side struct {
	Src, Dst               Use
	InPlaceSrc, InPlaceDst Use
}

// Desc describes one collective.
type Desc struct {
	Type Type
	// Name is the collective's name as UCC spells it ("reduce_scatter").
	Name string
	// Rooted: one rank, Args.Root, has a role of its own.
	Rooted bool
	// Reduction: the collective combines data with an Op, on the CPU; its buffers
	// must be CPU-reachable as well as registrable.
	Reduction bool
	// InPlace: an in-place form exists (on the root, for rooted collectives).
	InPlace bool
	// ReplacesSrc: on a rank whose two buffers have different memory types, staging
	// replaces the source, so that the data lands in the destination's type; else it
	// replaces the destination.
	ReplacesSrc bool
	// Root is the root's side (everyone's, for a non-rooted collective); Other the
	// other ranks' side of a rooted collective.
	Root, Other Side
}

// Side returns how rank uses its buffers.
func (d *Desc) Side(rank, root int) *Side {
	if d == nil { // Describe's answer for an invalid Type: no buffers
		return &Side{}
	}
	if d.Rooted && rank != root {
		return &d.Other
	}
	return &d.Root
}

// Describe returns the row of c, or nil for an invalid Type.
func Describe(c Type) *Desc {
	if !c.Valid() {
		return nil
	}
	return &table[c]
}

// IsRooted reports whether the collective has a root.
func (c Type) IsRooted() bool { return c.Valid() && table[c].Rooted }

// IsReduction reports whether the collective combines data with an Op.
func (c Type) IsReduction() bool { return c.Valid() && table[c].Reduction }

var (
	in    = func(e Extent) Use { return Use{e, In} }
	out   = func(e Extent) Use { return Use{e, Out} }
	inOut = func(e Extent) Use { return Use{e, In | Out} }
)

// table is the one description of every collective.
var table = [numTypes]Desc{
	Barrier: {Name: "barrier"},
	// UCC's bcast has one buffer on every rank, the source: the root sends from it,
	// the others receive into it (and forward from it).
	Bcast: {Name: "bcast", Rooted: true,
		Root:  Side{Src: in(Block)},
		Other: Side{Src: out(Block)}},
	Gather: {Name: "gather", Rooted: true, InPlace: true,
		Root:  Side{Src: in(Block), Dst: out(Blocks), InPlaceDst: inOut(Blocks)},
		Other: Side{Src: in(Block)}},
	Gatherv: {Name: "gatherv", Rooted: true, InPlace: true,
		Root:  Side{Src: in(Own), Dst: out(V), InPlaceDst: inOut(V)},
		Other: Side{Src: in(Own)}},
	// The root of an in-place scatter keeps its own block in its source and writes
	// nothing.
	Scatter: {Name: "scatter", Rooted: true, InPlace: true, ReplacesSrc: true,
		Root:  Side{Src: in(Blocks), Dst: out(Block), InPlaceSrc: in(Blocks)},
		Other: Side{Dst: out(Block)}},
	Scatterv: {Name: "scatterv", Rooted: true, InPlace: true, ReplacesSrc: true,
		Root:  Side{Src: in(V), Dst: out(Own), InPlaceSrc: in(V)},
		Other: Side{Dst: out(Own)}},
	Reduce: {Name: "reduce", Rooted: true, Reduction: true, InPlace: true,
		Root:  Side{Src: in(Block), Dst: out(Block), InPlaceDst: inOut(Block)},
		Other: Side{Src: in(Block)}},
	Allgather: {Name: "allgather", InPlace: true,
		Root: Side{Src: in(Block), Dst: out(Blocks), InPlaceDst: inOut(Blocks)}},
	Allreduce: {Name: "allreduce", Reduction: true, InPlace: true,
		Root: Side{Src: in(Block), Dst: out(Block), InPlaceDst: inOut(Block)}},
	Alltoall: {Name: "alltoall", InPlace: true,
		Root: Side{Src: in(Blocks), Dst: out(Blocks), InPlaceDst: inOut(Blocks)}},
	// In place, Dst holds every rank's input vector and receives the rank's reduced
	// block at its own place, rank × block.
	ReduceScatter: {Name: "reduce_scatter", Reduction: true, InPlace: true,
		Root: Side{Src: in(Blocks), Dst: out(Block), InPlaceDst: inOut(Blocks)}},
	Allgatherv: {Name: "allgatherv", InPlace: true,
		Root: Side{Src: in(Own), Dst: out(V), InPlaceDst: inOut(V)}},
	// In place, as MPI's: Dst's counts and displacements describe what goes to each
	// rank as well as what comes from it.
	Alltoallv: {Name: "alltoallv", InPlace: true,
		Root: Side{Src: in(V), Dst: out(V), InPlaceDst: inOut(V)}},
}

func init() {
	for c := range table {
		table[c].Type = Type(c)
		if !table[c].Rooted {
			table[c].Other = table[c].Root
		}
	}
}
