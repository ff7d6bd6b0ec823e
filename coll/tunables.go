package coll

import (
	"runtime"
	"time"
)

// The numbers that shape coll's behaviour, in one place.

// DefaultTimeout is the collective timeout when Config.Timeout is 0.
const DefaultTimeout = 60 * time.Second

// DefaultAbortGrace is how long a failing collective waits for its peers to acknowledge
// the abort when Config.AbortGrace is 0.
const DefaultAbortGrace = time.Second

// MinAbortGrace is the shortest Config.AbortGrace accepted. The grace is how long a
// failing rank waits for a peer's acknowledgement before it cuts the peer off, and a
// cut-off breaks the team: a post that another rank had already reported done then
// cannot learn its decision and ends with ErrTeamBroken (outcome unknown) while the
// others succeed. A live peer acknowledges at its next poll, so the grace must cover
// the longest a live rank goes without one (scheduling delays on a loaded machine,
// time spent outside the library). Issue 13's soak saw such splits with graces of
// 1-30 ms (5-9 ranks on 2 cores), none at the default; shorter graces are refused
// instead of letting a timing setting decide whether outcomes agree.
const MinAbortGrace = 100 * time.Millisecond

// abortDrain bounds how long past its grace an abort waits for the transport to finish
// the work requests of the failed post (Task.Quiesced): RC retries end a send to a
// peer that is gone in well under a second (7 retries of a 67 ms timeout), but a
// transport that never ends one must not hold the collective for ever. Past it the
// peers of the task are cut off, which flushes them, and the team breaks. A var only so
// that tests can shorten it.
var abortDrain = 5 * time.Second

// transportWakeMax is the longest a waiting rank stays in the transport's WaitEvent:
// news that no completion announces (a device's asynchronous events, which tlmlx5
// reads as it polls: a fatal device error may end no work request) must be looked at
// while a collective waits, not only at its deadline.
const transportWakeMax = 100 * time.Millisecond

// DefaultScratchCache is Config.ScratchCache's default.
const DefaultScratchCache = 256 << 20

// agreeRadix is the radix of the completion-agreement tree.
const agreeRadix = 8

// overlayRadix is the radix of the overlay tree (control.go) that aborts flood over
// and whose edges the signature check declares over: a rank has at most
// (overlayRadix-1)·log_overlayRadix(n) children, 28 at 4096 ranks.
const overlayRadix = 8

// maxRelayed bounds the collectives a team remembers having passed an abort on for
// after it closed them; past it the memory starts over (a second relay is harmless).
const maxRelayed = 256

// spinPolls is how many times a waiter polls, yielding in between, before it blocks,
// while the process has more goroutines driving progress than it runs at once
// (GOMAXPROCS): completions of a short collective come within a few scheduler
// rounds, and blocking costs a wake-up; with many ranks on few cores, spinning longer
// starves the peers. spinFree is how long a waiter polls while every such goroutine
// has a core of its own (one rank per process, or as many in-process ranks as
// cores): spinning then takes a core from nobody in this process, and a blocked
// waiter's wake-up costs more than the wait (measured in docs/design.md, "Progress").
// It is a time, not a count, since a poll's cost varies by three orders of magnitude
// between soft0 and rxe under emulation, and other processes may share the cores.
// Vars only so that a binary built with -tags ibcoll_spinhook can vary them for that
// measurement (spinhook.go); nothing else sets them.
var (
	spinPolls = 8
	spinFree  = 100 * time.Microsecond
	// spinFreeOwnCore replaces spinFree where every process of the job on this node
	// has a core (Config.LocalSize): over rxe, 2 processes on 2 cores, 2-rank
	// persistent gather and scatter of 1-64 KiB took 1.1-2.0 times less with 5 ms
	// than with 100 µs, in two alternated rounds ("Progress" in docs/design.md); a
	// wait there lasts longer than 100 µs, and the sleeper's wake-up costs more.
	spinFreeOwnCore = 5 * time.Millisecond
)

// spinFreeFor is how long a waiter of a team with cfg polls on free cores.
func spinFreeFor(cfg *Config) time.Duration {
	if cfg.LocalSize > 0 && cfg.LocalSize <= runtime.NumCPU() {
		return spinFreeOwnCore
	}
	return spinFree
}

// yieldEvery: a spinning waiter yields its core (runtime.Gosched) after every
// yieldEvery polls. A var only so that the diagnosis build can vary it (knobs_trace.go).
var yieldEvery = 1

// copyInPoll is how often a waiter polls while a staged source is copied in beside the
// wire (the transport waits for its chunks, which raise no completion): a chunk takes
// about 80 µs on an H200. A var only so that the diagnosis build can vary it
// (knobs_trace.go).
var copyInPoll = 50 * time.Microsecond

// pipelineMin is asym's threshold for copying a staged source in beside the wire; 0
// keeps asym's default. Tests lower it so that every staged source is copied in
// asynchronously, which shows any algorithm that reads its source without waiting.
var pipelineMin = 0

// sigDelay is how long the first post of a collective runs before this rank sends its
// signature to the children it waits for (see Request.sendSig): long enough that most
// collectives end first and send nothing, short against any deadline, so that a
// mismatch that leaves every rank waiting (two ranks that each believe they are the
// root) is reported as one within milliseconds.
const sigDelay = 5 * time.Millisecond

// closeDrain bounds how long Team.Close waits for what this rank owes its peers to
// leave (drainLocked); drainPoll is how often it looks meanwhile.
const (
	closeDrain = 2 * time.Second
	drainPoll  = 20 * time.Microsecond
)

// backlogStall is how long a Wait that finished keeps polling a transport whose
// backlog (messages behind a full send queue) does not shrink (deliverBacklog), and
// backlogMax how long in all; what is left then leaves from a goroutine of the team's
// (drainLater), which polls every backlogTick while the backlog lasts, for at most the
// Timeout and AbortGrace (the peers wait no longer for it).
const (
	backlogStall = 10 * time.Millisecond
	backlogMax   = 500 * time.Millisecond
	backlogTick  = 500 * time.Microsecond
)

// maxPendFree bounds the emptied stashes a team keeps for reuse (Team.newPending):
// one collective ahead is the common case, a few cover a peer that runs further ahead.
const maxPendFree = 4

// keepFraction: the keeper (keeper.go) polls a team that no call polls every
// AbortGrace / keepFraction, so that an idle rank answers a failed peer's abort well
// within the grace that peer waits.
const keepFraction = 4

// keepActiveFraction: while calls of the caller's keep coming, the keeper looks again
// after period / keepActiveFraction, so that it finds a rank idle soon after its last
// call: within half a period of it, where a full period's look took up to two (a rank
// that finished a collective on an assumed signature goes idle while its peers may
// still fail that collective, and they wait AbortGrace for its answer).
const keepActiveFraction = 4

// keepQuick: how soon the keeper polls again after a poll that took completions.
const keepQuick = 500 * time.Microsecond
