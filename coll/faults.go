package coll

import "github.com/ibcoll/ibcoll/fault"

// FaultKind names a step that Config.Faults can fail, to prove in tests that no failure
// turns into a hang. The vocabulary is package fault's, shared by every layer.
type FaultKind = fault.Kind

// The fault kinds; see package fault.
const (
	FaultAlloc    = fault.Alloc
	FaultReg      = fault.Reg
	FaultInit     = fault.Init
	FaultCopyIn   = fault.CopyIn
	FaultCopyOut  = fault.CopyOut
	FaultQPErr    = fault.QPErr
	FaultStall    = fault.Stall
	FaultDeadline = fault.Deadline
	FaultTeam     = fault.Team
	FaultConnect  = fault.Connect
)

// FaultKinds returns every fault kind.
func FaultKinds() []FaultKind { return fault.Kinds() }

// AnyRank makes a Fault apply on every rank.
const AnyRank = fault.AnyRank

// Fault fails the N-th step of Kind on rank Rank of a team (AnyRank: on every rank),
// counting from 1 over the steps of that kind taken by that rank's team, once. N = 0
// means 1. This is what ibcoll-perf's --fault KIND@RANK[:N] sets.
type Fault = fault.Fault

// ParseFault reads KIND@RANK[:N], e.g. "alloc@0", "copyout@3:2", "stall@*:5".
func ParseFault(s string) (Fault, error) {
	f, err := fault.Parse(s)
	if err != nil {
		return f, &argError{"coll: ParseFault: " + err.Error()}
	}
	return f, nil
}

// FaultFired reports whether f, a fault of Config.Faults, failed its step on this
// rank's team: the step was reached and its injected failure took effect (a stall or
// a link's break that another failure of the same post came before did not). Tools use
// it to say which faults they tested.
func (t *Team) FaultFired(f Fault) bool {
	if t.usable("FaultFired") != nil || (f.Rank != AnyRank && f.Rank != t.rank) {
		return false
	}
	return t.fs.Fired(f.Kind, f.N)
}

// FaultSteps returns how many steps of kind k this rank's team has taken, counted only
// where Config.Faults holds a fault of kind k for this rank (else 0). A fault with N
// was reached when FaultSteps reached N (FaultFired says whether it took effect): tools
// use it to say why a fault they were asked to inject never fired (a step not taken,
// like the copy-in of a source that is not staged).
func (t *Team) FaultSteps(k FaultKind) int64 {
	if t.usable("FaultSteps") != nil {
		return 0
	}
	return t.fs.Seen(k)
}
