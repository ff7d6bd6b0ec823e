package coll

import (
	"fmt"
	"strconv"
	"strings"
)

// FaultKind names a step that Config.Faults can fail, to prove in tests that no failure
// turns into a hang.
type FaultKind uint8

const (
	// FaultAlloc fails a scratch allocation at Init (asymmetric staging or the TL's).
	FaultAlloc FaultKind = iota + 1
	// FaultReg fails a memory registration of a collective (staging scratch, user
	// buffers, TL scratch); the team's own setup does not count.
	FaultReg
	// FaultInit fails Init itself, after it took its sequence number.
	FaultInit
	// FaultCopyIn fails the copy of a staged source into its scratch at Post.
	FaultCopyIn
	// FaultCopyOut fails the copy of a staged destination out of its scratch at
	// completion.
	FaultCopyOut
	// FaultQPErr moves a queue pair of the rank to the error state at Post: the team
	// breaks.
	FaultQPErr
	// FaultStall makes the rank stop progressing at Post: it moves nothing and reads
	// nothing until its own deadline, so the others must catch it with theirs.
	FaultStall
	// FaultDeadline makes the post's deadline expire at once: the rank aborts and tells
	// its peers, as on a real timeout.
	FaultDeadline
	// FaultTeam fails the rank's local setup in NewTeam.
	FaultTeam
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"", "alloc", "reg", "init", "copyin", "copyout", "qperr", "stall",
	"deadline", "team"}

func (k FaultKind) String() string {
	if k > 0 && k < numFaultKinds {
		return faultNames[k]
	}
	return fmt.Sprintf("FaultKind(%d)", uint8(k))
}

// FaultKinds returns every fault kind.
func FaultKinds() []FaultKind {
	out := make([]FaultKind, 0, numFaultKinds-1)
	for k := FaultAlloc; k < numFaultKinds; k++ {
		out = append(out, k)
	}
	return out
}

// AnyRank makes a Fault apply on every rank.
const AnyRank = -1

// Fault fails the N-th step of Kind on the rank Rank of a team (AnyRank: on every
// rank), counting from 1 over the steps of that kind taken by that rank's team, once.
// N = 0 means 1. This is what ibcoll-perf's --fault KIND@RANK[:N] sets.
type Fault struct {
	Kind FaultKind
	Rank int
	N    int
}

func (f Fault) String() string {
	n := max(f.N, 1)
	r := strconv.Itoa(f.Rank)
	if f.Rank == AnyRank {
		r = "*"
	}
	return fmt.Sprintf("%v@%s:%d", f.Kind, r, n)
}

// ParseFault reads KIND@RANK[:N], e.g. "alloc@0", "copyout@3:2", "stall@*:5".
func ParseFault(s string) (Fault, error) {
	bad := func(why string) (Fault, error) {
		return Fault{}, invalid("ParseFault", "fault %q: %s; want KIND@RANK[:N] with KIND one of %s, RANK a rank or *, N >= 1",
			s, why, strings.Join(faultNames[1:], ", "))
	}
	kind, rest, ok := strings.Cut(s, "@")
	if !ok {
		return bad("no @")
	}
	var f Fault
	for k := FaultAlloc; k < numFaultKinds; k++ {
		if faultNames[k] == kind {
			f.Kind = k
		}
	}
	if f.Kind == 0 {
		return bad("unknown kind")
	}
	rank, n, hasN := strings.Cut(rest, ":")
	if rank == "*" {
		f.Rank = AnyRank
	} else {
		r, err := strconv.Atoi(rank)
		if err != nil || r < 0 {
			return bad("bad rank")
		}
		f.Rank = r
	}
	f.N = 1
	if hasN {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return bad("bad N")
		}
		f.N = v
	}
	return f, nil
}

func (f Fault) validate(i int) error {
	switch {
	case f.Kind == 0 || f.Kind >= numFaultKinds:
		return invalid("NewContext", "Config.Faults[%d].Kind is unknown (%d)", i, uint8(f.Kind))
	case f.Rank < AnyRank:
		return invalid("NewContext", "Config.Faults[%d].Rank is %d, want a rank or AnyRank", i, f.Rank)
	case f.N < 0:
		return invalid("NewContext", "Config.Faults[%d].N is %d, want >= 1 (0 means 1)", i, f.N)
	}
	return nil
}

// faultSet counts the steps of one rank of one team and says which must fail. It is
// used under the team lock, or before the team exists.
type faultSet struct {
	at   [numFaultKinds][]int // the N of each fault of the kind that applies
	seen [numFaultKinds]int
}

func newFaultSet(faults []Fault, rank int) *faultSet {
	fs := &faultSet{}
	for _, f := range faults {
		if f.Rank == AnyRank || f.Rank == rank {
			fs.at[f.Kind] = append(fs.at[f.Kind], max(f.N, 1))
		}
	}
	return fs
}

// hit counts one step of kind and returns an error wrapping ErrInjected when it is one
// that must fail.
func (fs *faultSet) hit(kind FaultKind) error {
	if fs == nil || len(fs.at[kind]) == 0 {
		return nil
	}
	fs.seen[kind]++
	for _, n := range fs.at[kind] {
		if n == fs.seen[kind] {
			return fmt.Errorf("%w: %v #%d", ErrInjected, kind, n)
		}
	}
	return nil
}

// copyAt returns the N of the first copy fault of kind, for asym.Faults (0: none).
func (fs *faultSet) copyAt(kind FaultKind) int64 {
	if fs == nil || len(fs.at[kind]) == 0 {
		return 0
	}
	return int64(fs.at[kind][0])
}
