//go:build ibcoll_stagetrace

package asym

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ibcoll/ibcoll/internal/xknob"
)

func envBytes(name string, def int) int {
	if v, ok := xknob.Int(name, 1); ok {
		return v
	}
	return def
}

var xTunables = sync.OnceValue(func() [3]int {
	if c := envBytes("IBCOLL_X_PIPE_CHUNK", 0); c > 0 {
		pipeChunk, pipeChunkFixed = c, true
	}
	return [3]int{envBytes("IBCOLL_X_BATCH_MIN", defaultBatchMin), envBytes("IBCOLL_X_EARLY_MIN", defaultEarlyMin),
		envBytes("IBCOLL_X_PIPE_MIN", DefaultPipelineMin)}
})

func (*stageTrace) tune(s *Stage) {
	x := xTunables()
	s.batchMin, s.earlyMin, s.opts.pipeMin = x[0], x[1], x[2]
}

// stageTrace records a post's timeline, in builds with the ibcoll_stagetrace tag
// only: a diagnosis of where a staged collective's time goes, on a GPU machine.
// A stage with a scratch of at least 1 MiB writes one line per post to stderr at
// the end of Complete:
//
//	stagetrace <stage> <scratch bytes> <event>@<µs>[:<off>+<len>] ...
//
// with times from the start of CopyIn. Events: T that start, from the process's
// (traceEpoch); P post (CopyIn called), I copy-in
// done, L landed (a Landed call), q and Q a copy-out queued (before and after the
// call), C Complete called, S the queued copies waited for, s and D the synchronous
// copy-out started and done, i a step of a copy-in beside the wire done (recorded by
// its goroutine, added to the line once Complete has waited for it).
//
// For experiments, such a build also takes tunables from the environment:
// IBCOLL_X_BATCH_MIN (defaultBatchMin), IBCOLL_X_EARLY_MIN (defaultEarlyMin),
// IBCOLL_X_PIPE_CHUNK (every step of a pipelined copy-in: pipeChunk) and
// IBCOLL_X_PIPE_MIN (the smallest copy-in beside the wire, DefaultPipelineMin, unless
// an option of the stage sets it), in bytes.
type stageTrace struct {
	on  bool
	t0  time.Time
	evs []traceEvent
}

type traceEvent struct {
	at     time.Duration
	ev     byte
	off, n int
}

func (t *stageTrace) begin(s *Stage) {
	t.on = s.sides[0].plan.Bytes >= 1<<20 && s.sides[0].scratch != nil ||
		s.sides[1].plan.Bytes >= 1<<20 && s.sides[1].scratch != nil
	t.t0 = time.Now()
	t.evs = t.evs[:0]
}

func (t *stageTrace) mark(ev byte, off, n int) {
	if t.on {
		t.evs = append(t.evs, traceEvent{time.Since(t.t0), ev, off, n})
	}
}

func (t *stageTrace) end(s *Stage) {
	if !t.on {
		return
	}
	t.mark('D', 0, 0)
	var b strings.Builder
	fmt.Fprintf(&b, "stagetrace %p %d T@%.1f", s, max(s.sides[0].plan.Bytes, s.sides[1].plan.Bytes),
		float64(t.t0.Sub(traceEpoch).Nanoseconds())/1e3)
	for _, e := range t.evs {
		fmt.Fprintf(&b, " %c@%.1f", e.ev, float64(e.at.Nanoseconds())/1e3)
		if e.n > 0 {
			fmt.Fprintf(&b, ":%d+%d", e.off, e.n)
		}
	}
	b.WriteByte('\n')
	os.Stderr.WriteString(b.String())
	t.on = false
}

// traceEpoch is the zero of every line's T event, the time its post began, so that
// the lines of the ranks of one process line up.
var traceEpoch = time.Now()

// copyInTrace records when each step of a pipelined copy-in ended; only its
// goroutine writes it, and joinCopyIn reads it after the goroutine ended.
type copyInTrace struct {
	steps []copyInStep
}

type copyInStep struct {
	at     time.Time
	off, n int
}

func (c *copyInTrace) step(off, n int) { c.steps = append(c.steps, copyInStep{time.Now(), off, n}) }

// copyIn adds the steps of a copy-in that has ended to the post's timeline.
func (t *stageTrace) copyIn(c *copyInTrace) {
	if t.on {
		for _, st := range c.steps {
			t.evs = append(t.evs, traceEvent{st.at.Sub(t.t0), 'i', st.off, st.n})
		}
	}
}
