package coll

import (
	"fmt"
	"strings"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/mem"
)

// CollType names a collective; see package collective for what each one is. The zero
// value is invalid, so that a forgotten Type is an error instead of a barrier.
type CollType = collective.Type

// The collectives.
const (
	Barrier       = collective.Barrier
	Bcast         = collective.Bcast
	Gather        = collective.Gather
	Gatherv       = collective.Gatherv
	Scatter       = collective.Scatter
	Scatterv      = collective.Scatterv
	Reduce        = collective.Reduce
	Allgather     = collective.Allgather
	Allreduce     = collective.Allreduce
	Alltoall      = collective.Alltoall
	ReduceScatter = collective.ReduceScatter
	Allgatherv    = collective.Allgatherv
	Alltoallv     = collective.Alltoallv
)

// CollTypes returns every collective in declaration order.
func CollTypes() []CollType { return collective.Types() }

// ParseCollType is the inverse of CollType.String.
func ParseCollType(s string) (CollType, error) {
	c, err := collective.ParseType(s)
	return c, wrapArg("ParseCollType", err)
}

// DType is an element type. The zero value is invalid.
type DType = collective.DType

// The element types.
const (
	Int8     = collective.Int8
	Int16    = collective.Int16
	Int32    = collective.Int32
	Int64    = collective.Int64
	Uint8    = collective.Uint8
	Uint16   = collective.Uint16
	Uint32   = collective.Uint32
	Uint64   = collective.Uint64
	Float16  = collective.Float16
	BFloat16 = collective.BFloat16
	Float32  = collective.Float32
	Float64  = collective.Float64
)

// DTypes returns every element type in declaration order.
func DTypes() []DType { return collective.DTypes() }

// ParseDType is the inverse of DType.String.
func ParseDType(s string) (DType, error) {
	d, err := collective.ParseDType(s)
	return d, wrapArg("ParseDType", err)
}

// Op is a reduction operator. The zero value is invalid.
type Op = collective.Op

// The reduction operators.
const (
	OpSum  = collective.OpSum
	OpProd = collective.OpProd
	OpMin  = collective.OpMin
	OpMax  = collective.OpMax
	OpBand = collective.OpBand
	OpBor  = collective.OpBor
	OpBxor = collective.OpBxor
	OpLand = collective.OpLand
	OpLor  = collective.OpLor
	OpLxor = collective.OpLxor
	OpAvg  = collective.OpAvg
)

// Ops returns every operator in declaration order.
func Ops() []Op { return collective.Ops() }

// ParseOp is the inverse of Op.String.
func ParseOp(s string) (Op, error) {
	o, err := collective.ParseOp(s)
	return o, wrapArg("ParseOp", err)
}

// CheckOp reports whether op applies to dt: bitwise operators need an integer type.
func CheckOp(op Op, dt DType) error { return wrapArg("CheckOp", collective.CheckOp(op, dt)) }

// Flags modify a collective.
type Flags uint8

const (
	// InPlace: the rank's input is already in its destination (gather, gatherv and
	// reduce on the root; allgather, allgatherv, allreduce, reduce_scatter, alltoall and
	// alltoallv everywhere) or its output stays in its source (scatter, scatterv on the
	// root). Ignored on non-roots of rooted collectives, and by bcast and barrier, which
	// have no in-place form (package collective's table has each one's layout).
	InPlace Flags = 1 << iota
	// Persistent: the request may be posted again after each successful completion,
	// with the same buffers; buffers are registered and keys exchanged once. A
	// persistent request whose output is staged (its memory type out of the
	// transport's reach) may hold that output in two more host buffers of the
	// transport's, up to 64 MiB each, so that peers write the next post while this one
	// is copied out (Request.Staging says so: Alternate).
	Persistent
)

func (f Flags) String() string {
	var s []string
	if f&InPlace != 0 {
		s = append(s, "in-place")
	}
	if f&Persistent != 0 {
		s = append(s, "persistent")
	}
	if rest := f &^ (InPlace | Persistent); rest != 0 {
		s = append(s, fmt.Sprintf("%#x", uint8(rest)))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// BufferDesc describes one buffer of a collective. Exactly one of Addr, Slice and Buf
// gives its memory (none is needed when the collective moves no element through it):
// Addr is an address of memory of Type (a device pointer for CUDA and sim memory),
// Slice is Go memory (host; it is pinned while registered), Buf is a mem.Buffer (needed
// for DM, which has no CPU address; Type defaults to Buf.Type()).
//
// Count is the number of elements; the v-collectives' per-rank buffers (gatherv's and
// allgatherv's Dst, scatterv's Src, alltoallv's Src and Dst) use Counts and Displs
// instead, one entry per rank, in elements. The non-empty blocks of a v-layout that
// the collective writes (gatherv's and allgatherv's Dst, alltoallv's Dst) must not
// share elements; those it only reads may. Src and Dst must not share bytes unless
// InPlace says so, where a v-layout's bytes are those of its non-empty blocks: the
// other buffer may lie in a gap between them. Init refuses either, naming the buffer.
type BufferDesc struct {
	Addr   uintptr
	Slice  []byte
	Buf    *mem.Buffer
	Type   mem.Type
	Count  int
	Counts []int
	Displs []int
}

// empty reports whether d names no memory and no count.
func (d BufferDesc) empty() bool {
	return d.Addr == 0 && d.Slice == nil && d.Buf == nil && d.Count == 0 && d.Counts == nil && d.Displs == nil
}

// Args describe one collective on one rank. Every rank of the team initializes the
// same collectives in the same order; Type, Root, DType, Op and the algorithm must
// agree across ranks (they are checked). Op is read by the reductions only (reduce,
// allreduce, reduce-scatter): the other collectives ignore it, so ranks that fill it
// differently still agree.
type Args struct {
	Type  CollType
	Root  int
	Src   BufferDesc
	Dst   BufferDesc
	DType DType
	Op    Op
	Flags Flags
	// Alg names the algorithm ("linear", "knomial", "knomial:4" with a radix, ...);
	// empty picks Config.Algs (which ConfigFromEnv fills from $IBCOLL_ALG_<COLL>), then
	// the transport's default by size.
	Alg string
}

// StagingReport is Request.Staging's answer: how each side of this rank goes through
// the collective, and the bytes the staging copies moved.
type StagingReport = asym.Report
