// Package fault is the one fault vocabulary of the library: the steps of a collective
// that tests and ibcoll-perf's --fault KIND@RANK[:N] can make fail, and the counter
// (Set) that every layer of one rank's team consults at those steps. coll counts Init,
// its post-time faults and team setup, asym counts its allocations, registrations and
// copies, and the transport counts its own scratch allocations and registrations, all
// on the same Set, so "the N-th alloc of rank 2" means the same thing whichever layer
// takes that step.
//
// A Set is safe for concurrent use.
package fault

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ibcoll/ibcoll/internal/errs"
)

// ErrInjected is wrapped by every failure a Set makes, so that tests tell an injected
// failure from a real one.
var ErrInjected = errs.ErrInjected

// Kind names a step that can be made to fail.
type Kind uint8

const (
	// Alloc fails a scratch allocation at Init (asymmetric staging or the transport's).
	Alloc Kind = iota + 1
	// Reg fails a memory registration of a collective (staging scratch, user buffers,
	// transport scratch); the team's own setup does not count.
	Reg
	// Init fails Init itself, after it took its sequence number.
	Init
	// CopyIn fails the copy of a staged source into its scratch at Post.
	CopyIn
	// CopyOut fails the copy of a staged destination out of its scratch at completion.
	CopyOut
	// QPErr breaks the rank's link to a peer at Post (an RC transport moves a queue
	// pair to the error state): the team breaks.
	QPErr
	// Stall makes the rank stop progressing at Post: it moves nothing and reads nothing
	// until its own deadline, so the others must catch it with theirs.
	Stall
	// Deadline makes the post's deadline expire at once: the rank aborts and tells its
	// peers, as on a real timeout.
	Deadline
	// Team fails the rank's local setup in NewTeam.
	Team
	// Connect fails the rank's connection to a peer, where a transport connects on
	// first use (at the N-th peer it links): the link goes down and the team breaks.
	Connect
	numKinds
)

var names = [numKinds]string{"", "alloc", "reg", "init", "copyin", "copyout", "qperr", "stall", "deadline", "team", "connect"}

func (k Kind) String() string {
	if k.Valid() {
		return names[k]
	}
	return fmt.Sprintf("fault.Kind(%d)", uint8(k))
}

// Valid reports whether k is a declared kind.
func (k Kind) Valid() bool { return k > 0 && k < numKinds }

// Kinds returns every kind.
func Kinds() []Kind {
	out := make([]Kind, 0, numKinds-1)
	for k := Alloc; k < numKinds; k++ {
		out = append(out, k)
	}
	return out
}

// AnyRank makes a Fault apply on every rank.
const AnyRank = -1

// Fault fails the N-th step of Kind on rank Rank of a team (AnyRank: on every rank),
// counting from 1 over the steps of that kind taken by that rank's team, once. N = 0
// means 1.
type Fault struct {
	Kind Kind
	Rank int
	N    int
}

func (f Fault) String() string {
	r := strconv.Itoa(f.Rank)
	if f.Rank == AnyRank {
		r = "*"
	}
	return fmt.Sprintf("%v@%s:%d", f.Kind, r, max(f.N, 1))
}

// Validate checks f; the error names field as the caller knows it (for example
// "Config.Faults[2]").
func (f Fault) Validate(field string) error {
	switch {
	case !f.Kind.Valid():
		return fmt.Errorf("%s.Kind is unknown (%d): %w", field, uint8(f.Kind), errs.ErrInvalid)
	case f.Rank < AnyRank:
		return fmt.Errorf("%s.Rank is %d, want a rank or AnyRank: %w", field, f.Rank, errs.ErrInvalid)
	case f.N < 0:
		return fmt.Errorf("%s.N is %d, want >= 1 (0 means 1): %w", field, f.N, errs.ErrInvalid)
	}
	return nil
}

// Parse reads KIND@RANK[:N], e.g. "alloc@0", "copyout@3:2", "stall@*:5".
func Parse(s string) (Fault, error) {
	bad := func(why string) (Fault, error) {
		return Fault{}, fmt.Errorf("fault %q: %s; want KIND@RANK[:N] with KIND one of %s, RANK a rank or *, N >= 1: %w",
			s, why, strings.Join(names[1:], ", "), errs.ErrInvalid)
	}
	kind, rest, ok := strings.Cut(s, "@")
	if !ok {
		return bad("no @")
	}
	var f Fault
	for k := Alloc; k < numKinds; k++ {
		if names[k] == kind {
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

// Set counts the steps that one rank of one team takes and says which must fail. The
// nil Set never fails.
type Set struct {
	at   [numKinds][]int64 // the N of each fault of the kind that applies
	seen [numKinds]atomic.Int64

	mu    sync.Mutex
	fired [numKinds][]int64 // the N of each fault whose failure took effect
}

// NewSet keeps the faults of faults that apply to rank; nil when none does.
func NewSet(faults []Fault, rank int) *Set {
	var s *Set
	for _, f := range faults {
		if f.Kind.Valid() && (f.Rank == AnyRank || f.Rank == rank) {
			if s == nil {
				s = &Set{}
			}
			s.at[f.Kind] = append(s.at[f.Kind], int64(max(f.N, 1)))
		}
	}
	return s
}

// Hit counts one step of kind k and returns an error wrapping ErrInjected when it is
// one that must fail.
// The step's failure counts as fired (Fired): the caller fails the step with it.
func (s *Set) Hit(k Kind) error {
	took, err := s.Arm(k)
	took()
	return err
}

// Arm is Hit for a step whose failure the caller applies later, or not at all when
// another failure of the same operation comes first: it counts as fired only once the
// caller calls took (a no-op where err is nil). A tool that says a fault fired must
// not say so of one that had no effect.
func (s *Set) Arm(k Kind) (took func(), err error) {
	if s == nil || !k.Valid() || len(s.at[k]) == 0 {
		return func() {}, nil
	}
	n := s.seen[k].Add(1)
	for _, at := range s.at[k] {
		if at == n {
			return func() {
				s.mu.Lock()
				s.fired[k] = append(s.fired[k], n)
				s.mu.Unlock()
			}, fmt.Errorf("%w: %v #%d", ErrInjected, k, n)
		}
	}
	return func() {}, nil
}

// Fired reports whether the fault of kind k at step n (0: 1) failed its step: it was
// reached, and its failure took effect.
func (s *Set) Fired(k Kind, n int) bool {
	if s == nil || !k.Valid() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.fired[k], int64(max(n, 1)))
}

// Seen returns how many steps of kind k were counted (only kinds with a fault are).
func (s *Set) Seen(k Kind) int64 {
	if s == nil || !k.Valid() {
		return 0
	}
	return s.seen[k].Load()
}
