package coll

import (
	"fmt"
	"strings"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/mem"
)

// CollType names a collective. The zero value is invalid, so that a forgotten Type is
// an error instead of a barrier.
type CollType uint8

const (
	Barrier CollType = iota + 1
	Bcast
	Gather
	Gatherv
	Scatter
	Scatterv
	Reduce
	Allgather
	Allreduce
	Alltoall
	numCollTypes
)

var collTypeNames = [numCollTypes]string{"", "barrier", "bcast", "gather", "gatherv", "scatter", "scatterv",
	"reduce", "allgather", "allreduce", "alltoall"}

func (c CollType) String() string {
	if c > 0 && c < numCollTypes {
		return collTypeNames[c]
	}
	return fmt.Sprintf("CollType(%d)", uint8(c))
}

// Valid reports whether c is a declared collective.
func (c CollType) Valid() bool { return c > 0 && c < numCollTypes }

// CollTypes returns every collective in declaration order.
func CollTypes() []CollType {
	out := make([]CollType, 0, numCollTypes-1)
	for c := Barrier; c < numCollTypes; c++ {
		out = append(out, c)
	}
	return out
}

// ParseCollType is the inverse of String.
func ParseCollType(s string) (CollType, error) {
	for c := Barrier; c < numCollTypes; c++ {
		if collTypeNames[c] == strings.ToLower(s) {
			return c, nil
		}
	}
	return 0, invalid("ParseCollType", "unknown collective %q (valid: %s)", s, strings.Join(collTypeNames[1:], ", "))
}

// IsRooted reports whether the collective has a root.
func (c CollType) IsRooted() bool {
	switch c {
	case Bcast, Gather, Gatherv, Scatter, Scatterv, Reduce:
		return true
	}
	return false
}

// IsReduction reports whether the collective combines data with an Op.
func (c CollType) IsReduction() bool { return c == Reduce || c == Allreduce }

func (c CollType) asym() asym.Coll {
	switch c {
	case Barrier:
		return asym.Barrier
	case Bcast:
		return asym.Bcast
	case Gather:
		return asym.Gather
	case Gatherv:
		return asym.Gatherv
	case Scatter:
		return asym.Scatter
	case Scatterv:
		return asym.Scatterv
	case Reduce:
		return asym.Reduce
	case Allgather:
		return asym.Allgather
	case Allreduce:
		return asym.Allreduce
	case Alltoall:
		return asym.Alltoall
	}
	return asym.Coll(255)
}

// DType is an element type. The zero value is invalid.
type DType uint8

const (
	Int8 DType = iota + 1
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float16
	BFloat16
	Float32
	Float64
	numDTypes
)

var dtypeNames = [numDTypes]string{"", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
	"float16", "bfloat16", "float32", "float64"}

var dtypeSizes = [numDTypes]int{0, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8}

func (d DType) String() string {
	if d > 0 && d < numDTypes {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Valid reports whether d is a declared datatype.
func (d DType) Valid() bool { return d > 0 && d < numDTypes }

// Size is the size of one element in bytes, 0 for an invalid type.
func (d DType) Size() int {
	if d.Valid() {
		return dtypeSizes[d]
	}
	return 0
}

// IsInteger reports whether d is a signed or unsigned integer type.
func (d DType) IsInteger() bool { return d >= Int8 && d <= Uint64 }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d >= Float16 && d <= Float64 }

// DTypes returns every datatype in declaration order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := Int8; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// ParseDType is the inverse of String.
func ParseDType(s string) (DType, error) {
	for d := Int8; d < numDTypes; d++ {
		if dtypeNames[d] == strings.ToLower(s) {
			return d, nil
		}
	}
	return 0, invalid("ParseDType", "unknown datatype %q (valid: %s)", s, strings.Join(dtypeNames[1:], ", "))
}

// Op is a reduction operator. The zero value is invalid.
type Op uint8

const (
	OpSum Op = iota + 1
	OpProd
	OpMin
	OpMax
	OpBand
	OpBor
	OpBxor
	OpLand
	OpLor
	OpLxor
	OpAvg
	numOps
)

var opNames = [numOps]string{"", "sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor", "lxor", "avg"}

func (o Op) String() string {
	if o > 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Valid reports whether o is a declared operator.
func (o Op) Valid() bool { return o > 0 && o < numOps }

// IsBitwise reports whether o works on bits, which only integer types have.
func (o Op) IsBitwise() bool { return o == OpBand || o == OpBor || o == OpBxor }

// Ops returns every operator in declaration order.
func Ops() []Op {
	out := make([]Op, 0, numOps-1)
	for o := OpSum; o < numOps; o++ {
		out = append(out, o)
	}
	return out
}

// ParseOp is the inverse of String.
func ParseOp(s string) (Op, error) {
	for o := OpSum; o < numOps; o++ {
		if opNames[o] == strings.ToLower(s) {
			return o, nil
		}
	}
	return 0, invalid("ParseOp", "unknown op %q (valid: %s)", s, strings.Join(opNames[1:], ", "))
}

// CheckOp reports whether op applies to dtype: bitwise operators need an integer type.
func CheckOp(op Op, dt DType) error {
	switch {
	case !op.Valid():
		return invalid("CheckOp", "Args.Op is not a valid operator (%d)", uint8(op))
	case !dt.Valid():
		return invalid("CheckOp", "Args.DType is not a valid datatype (%d)", uint8(dt))
	case op.IsBitwise() && !dt.IsInteger():
		return invalid("CheckOp", "Args.Op %v is bitwise and needs an integer datatype, got Args.DType %v", op, dt)
	}
	return nil
}

// Flags modify a collective.
type Flags uint8

const (
	// InPlace: the rank's input is already in its destination (gather, reduce on the
	// root; allgather, allreduce, alltoall everywhere) or its output stays in its source
	// (scatter, scatterv on the root). Ignored on non-roots of rooted collectives.
	InPlace Flags = 1 << iota
	// Persistent: the request may be posted again after each successful completion,
	// with the same buffers; buffers are registered and keys exchanged once.
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
// Count is the number of elements; v-collectives (gatherv's Dst, scatterv's Src) use
// Counts and Displs instead, one entry per rank, in elements.
type BufferDesc struct {
	Addr   uintptr
	Slice  []byte
	Buf    *mem.Buffer
	Type   mem.Type
	Count  int
	Counts []int
	Displs []int
}

// Args describe one collective on one rank. Every rank of the team initializes the
// same collectives in the same order; Type, Root, DType, Op and the algorithm must
// agree across ranks (they are checked).
type Args struct {
	Type  CollType
	Root  int
	Src   BufferDesc
	Dst   BufferDesc
	DType DType
	Op    Op
	Flags Flags
	// Alg names the algorithm ("linear", "knomial", "knomial:4" with a radix, ...);
	// empty picks $IBCOLL_ALG_<COLL>, then Config.Algs, then the TL's default.
	Alg string
}
