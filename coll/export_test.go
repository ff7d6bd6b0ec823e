package coll

import (
	"errors"
	"io"
	"time"

	"github.com/ibcoll/ibcoll/internal/topo"
	"github.com/ibcoll/ibcoll/mem"

	"github.com/ibcoll/ibcoll/topology"
)

// SetPipelineMin sets the pipelined copy-in threshold for the tests of this package and
// returns the function that restores it.
func SetPipelineMin(n int) (restore func()) {
	old := pipelineMin
	pipelineMin = n
	return func() { pipelineMin = old }
}

// SetAbortDrain sets abortDrain for the tests of this package and returns the
// function that restores it.
func SetAbortDrain(d time.Duration) (restore func()) {
	old := abortDrain
	abortDrain = d
	return func() { abortDrain = old }
}

// SetPlacement makes NewContext place on topo (nil: as Discover fails, with
// err) and select CUDA devices through use, for the tests of this package; it
// returns the function that restores both.
func SetPlacement(topo *topology.Topology, err error, use func(int) error) (restore func()) {
	oldD, oldU := discovered, useCUDADevice
	discovered = func() (*topology.Topology, error) { return topo, err }
	useCUDADevice = use
	return func() { discovered, useCUDADevice = oldD, oldU }
}

// Place runs NewContext's placement on cfg.
func Place(cfg Config) (Config, Placement) {
	p := place(&cfg)
	return cfg, p
}

// BreakSilently marks t broken as a rank does whose break news has not reached its
// peers yet (nothing is flooded), for the tests of this package.
func BreakSilently(t *Team, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.broken = &brokenError{err}
	t.flooded = true
}

// NextSeq is the number the team's next Init takes.
func NextSeq(t *Team) uint64 { return t.nextSeq.Load() }

// Backlog is what the team's transport holds behind full send queues (0 where it
// does not say).
func Backlog(t *Team) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.tl.(backlogger); ok {
		return b.Backlog()
	}
	return 0
}

// SigMessages reports how many signature messages t sent: up the overlay tree
// (ctlSigUp) and verdicts down it (ctlSigOK).
func SigMessages(t *Team) (up, verdicts uint64) {
	return t.sentKinds[ctlSigUp].Load(), t.sentKinds[ctlSigOK].Load()
}

// Draining reports whether the drainer (drainLater) runs.
func Draining(t *Team) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.drainDone != nil
}

// MailboxGone asks t's Messenger whether peer's mailbox is closed, under the team lock,
// as the transport does for a link being made (tlmlx5's checkLinks); the news it records
// is read at the next progress.
func MailboxGone(t *Team, peer int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return teamMessenger{t}.Gone(peer)
}

// MarkLooks is how many closed marks TCPOOB mailboxes looked for in the store.
func MarkLooks() int64 { return markLooks.Load() }

// FailDeregOnce makes t's next Close fail once, at deregistering a staging buffer (as
// a failed ibv_dereg_mr would); the Close after it succeeds.
func FailDeregOnce(t *Team) error {
	b, err := mem.Alloc(mem.Host, 64)
	if err != nil {
		return err
	}
	t.scratch.mu.Lock()
	defer t.scratch.mu.Unlock()
	if t.scratch.regs == nil {
		t.scratch.regs = map[*mem.Buffer]io.Closer{}
	}
	t.scratch.regs[b] = &failOnceReg{b: b}
	return nil
}

type failOnceReg struct {
	b      *mem.Buffer
	failed bool
}

func (f *failOnceReg) Close() error {
	if !f.failed {
		f.failed = true
		return errors.New("injected deregistration failure")
	}
	return f.b.Close()
}

// OverlayNeighbours returns rank's parent (if any) and children in the overlay tree of
// a team of n: the edges of the default mode's signature check.
func OverlayNeighbours(n, rank int) []int {
	p, c := topo.KNomialPeers(n, 0, rank, overlayRadix)
	if p >= 0 {
		c = append([]int{p}, c...)
	}
	return c
}

// KeeperPolls counts the polls the keeper made of t.
func KeeperPolls(t *Team) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.keeperPolls
}

// FailNextScratchDereg makes the next scratch registration the cache keeps fail its
// first release (the retry succeeds), until restore; fired says whether it failed.
func FailNextScratchDereg() (restore func(), fired func() bool) {
	armed := true
	var f *failOnce
	wrapScratchReg = func(c io.Closer) io.Closer {
		if !armed {
			return c
		}
		armed = false
		f = &failOnce{c: c}
		return f
	}
	return func() { wrapScratchReg = nil }, func() bool { return f != nil && f.failed }
}

type failOnce struct {
	c      io.Closer
	failed bool
}

func (f *failOnce) Close() error {
	if !f.failed {
		f.failed = true
		return errors.New("injected: a scratch deregistration fails once")
	}
	return f.c.Close()
}

// TransportWakeMax is the longest a waiting rank stays in the transport's WaitEvent.
const TransportWakeMax = transportWakeMax

// SetMailboxHoles sets how often a TCPOOB mailbox looks past an empty slot and how
// long it waits before passing over a hole; the returned func restores them.
func SetMailboxHoles(look, grace time.Duration) (restore func()) {
	l, g := holeLook, holeGrace
	holeLook, holeGrace = look, grace
	return func() { holeLook, holeGrace = l, g }
}
