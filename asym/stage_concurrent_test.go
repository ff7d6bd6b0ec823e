package asym

import (
	"sync"
	"testing"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/stretchr/testify/require"
)

// TestStageInitConcurrent: of two Inits racing on one Stage, exactly one makes it and
// the other is refused as in use, while other methods read the Stage; Close then frees
// everything. Before, both could pass the in-use check (Init released the lock before
// it made the Stage): one's scratch and registration were lost, unfreed by Close, and
// Init rewrote the Stage, its mutex included, under the readers; the readers that take
// no lock (Ready, CopyingIn) raced with Init's reset of the atomics they read.
func TestStageInitConcurrent(t *testing.T) {
	plan := Staging{Dst: Scratch{Needed: true, Type: mem.Host, Bytes: 64, CopyOut: true, Spans: []Span{{0, 64}}}}
	dst := newBuf(t, mem.Sim, 64)
	ub := UserBuf{Addr: dst.Addr(), Type: mem.Sim, Len: 64, Buf: dst}
	reg := &fakeRegistrar{}
	before := mem.Live()
	for it := range 200 {
		var s Stage
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[k] = s.Init(plan, UserBuf{}, ub, reg) }()
		}
		wg.Add(2)
		go func() { defer wg.Done(); _ = s.Staged(); _ = s.Dst() }()
		go func() { defer wg.Done(); _, _ = s.Ready(0, 1); _ = s.CopyingIn(); _ = s.Report() }()
		wg.Wait()
		made := 0
		for _, err := range errs {
			if err == nil {
				made++
			} else {
				require.ErrorContains(t, err, "in use", "iteration %d", it)
			}
		}
		require.Equal(t, 1, made, "iteration %d: Inits that made the stage: %v", it, errs)
		require.Equal(t, before+1, mem.Live(), "iteration %d: scratch buffers of one stage", it)
		require.NoError(t, s.Close())
		require.Equal(t, before, mem.Live(), "iteration %d: scratch left after Close", it)
		require.Zero(t, reg.live.Load(), "iteration %d: registrations left after Close", it)
	}
}
