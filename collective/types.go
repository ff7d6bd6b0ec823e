package collective

import (
	"fmt"
	"strings"
)

// Type names a collective. The zero value is invalid, so that a forgotten Type is an
// error instead of a barrier.
type Type uint8

// The collectives. The numbers are stable: new ones are added at the end.
const (
	Barrier Type = iota + 1
	Bcast
	Gather
	Gatherv
	Scatter
	Scatterv
	Reduce
	Allgather
	Allreduce
	Alltoall
	ReduceScatter
	Allgatherv
	Alltoallv
	numTypes
)

func (c Type) String() string {
	if c.Valid() {
		return table[c].Name
	}
	return fmt.Sprintf("Type(%d)", uint8(c))
}

// Valid reports whether c is a declared collective.
func (c Type) Valid() bool { return c > 0 && c < numTypes }

// Types returns every collective in declaration order.
func Types() []Type {
	out := make([]Type, 0, numTypes-1)
	for c := Barrier; c < numTypes; c++ {
		out = append(out, c)
	}
	return out
}

// ParseType is the inverse of String (case-insensitive).
func ParseType(s string) (Type, error) {
	var names []string
	for c := Barrier; c < numTypes; c++ {
		if table[c].Name == strings.ToLower(s) {
			return c, nil
		}
		names = append(names, table[c].Name)
	}
	return 0, invalidf("unknown collective %q (valid: %s)", s, strings.Join(names, ", "))
}

// DType is an element type. The zero value is invalid.
type DType uint8

// The element types.
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
	if d.Valid() {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Valid reports whether d is a declared element type.
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

// DTypes returns every element type in declaration order.
func DTypes() []DType {
	out := make([]DType, 0, numDTypes-1)
	for d := Int8; d < numDTypes; d++ {
		out = append(out, d)
	}
	return out
}

// ParseDType is the inverse of String (case-insensitive).
func ParseDType(s string) (DType, error) {
	for d := Int8; d < numDTypes; d++ {
		if dtypeNames[d] == strings.ToLower(s) {
			return d, nil
		}
	}
	return 0, invalidf("unknown datatype %q (valid: %s)", s, strings.Join(dtypeNames[1:], ", "))
}

// Op is a reduction operator. The zero value is invalid.
type Op uint8

// The reduction operators.
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
	if o.Valid() {
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

// ParseOp is the inverse of String (case-insensitive).
func ParseOp(s string) (Op, error) {
	for o := OpSum; o < numOps; o++ {
		if opNames[o] == strings.ToLower(s) {
			return o, nil
		}
	}
	return 0, invalidf("unknown op %q (valid: %s)", s, strings.Join(opNames[1:], ", "))
}

// CheckOp reports whether op applies to dt: bitwise operators need an integer type.
// The error names Args.Op or Args.DType.
func CheckOp(op Op, dt DType) error {
	switch {
	case !op.Valid():
		return invalidf("Args.Op is not a valid operator (%d)", uint8(op))
	case !dt.Valid():
		return invalidf("Args.DType is not a valid datatype (%d)", uint8(dt))
	case op.IsBitwise() && !dt.IsInteger():
		return invalidf("Args.Op %v is bitwise and needs an integer datatype, got Args.DType %v", op, dt)
	}
	return nil
}
