package asym

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// FaultKind names a step of a Stage that Faults can fail.
type FaultKind uint8

// The steps that Faults counts. Alloc and Register count scratch buffers at NewStage;
// CopyIn and CopyOut count copies of one staged buffer at a post or a completion.
const (
	FaultAlloc FaultKind = iota
	FaultRegister
	FaultCopyIn
	FaultCopyOut
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"alloc", "register", "copyin", "copyout"}

func (k FaultKind) String() string {
	if k < numFaultKinds {
		return faultNames[k]
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// Faults fails chosen steps of the stages that share it, for tests and for the
// --fault flag of the drivers. At[k] = n fails the n-th step of kind k (counting from 1,
// over every stage given this Faults), once; 0 never fails. The failure comes back as an
// error wrapping ErrInjected that names the step and the buffer.
//
// A Faults is safe for concurrent use. Set At before handing it to NewStage; it must not
// be copied after first use.
type Faults struct {
	At   [numFaultKinds]int64
	seen [numFaultKinds]atomic.Int64
}

// ParseFaults reads a comma-separated list of kind=n, e.g. "alloc=2,copyout=5".
// The empty string gives a Faults that never fails.
func ParseFaults(s string) (*Faults, error) {
	f := new(Faults)
	if s == "" {
		return f, nil
	}
	for _, item := range strings.Split(s, ",") {
		name, num, ok := strings.Cut(item, "=")
		k := FaultKind(0)
		for k < numFaultKinds && faultNames[k] != name {
			k++
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if !ok || k == numFaultKinds || err != nil || n < 1 {
			return nil, invalid("fault %q: want kind=n with kind one of %s and n >= 1",
				item, strings.Join(faultNames[:], ", "))
		}
		f.At[k] = n
	}
	return f, nil
}

func (f *Faults) String() string {
	var parts []string
	for k, n := range f.At {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", FaultKind(k), n))
		}
	}
	return strings.Join(parts, ",")
}

// Seen returns how many steps of kind k the stages sharing f have taken.
func (f *Faults) Seen(k FaultKind) int64 { return f.seen[k].Load() }

// hit counts one step of kind k and returns the injected error if it is the chosen one;
// the caller's error names the buffer.
func (f *Faults) hit(k FaultKind) error {
	if f == nil {
		return nil
	}
	n := f.seen[k].Add(1)
	if n != f.At[k] {
		return nil
	}
	return fmt.Errorf("%w: %s #%d", ErrInjected, k, n)
}
