package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
)

// An empty block's displacement is not part of a v-layout buffer: a staged gatherv
// whose root has Counts {0, 1} and Displs {1<<40, 0} must stage 1 element, not a
// terabyte (the plan used to size the scratch by every displacement).
func TestRegressionEmptyBlockDisplacement(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 10 * time.Second})
	dst, err := mem.Alloc(mem.Sim, 4)
	require.NoError(t, err)
	defer dst.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.mustRun(func(r *rank) error {
		a := coll.Args{Type: coll.Gatherv, Root: 0, DType: coll.Uint8}
		if r.r == 0 {
			a.Src = coll.BufferDesc{Slice: make([]byte, 1), Count: 0}
			a.Dst = coll.BufferDesc{Buf: dst, Type: mem.Sim, Counts: []int{0, 1}, Displs: []int{1 << 40, 0}}
		} else {
			a.Src = coll.BufferDesc{Slice: []byte{42}, Count: 1}
		}
		return r.team.Run(ctx, a)
	})
	require.Equal(t, byte(42), readMem(t, dst.Addr(), mem.Sim, 1)[0])
}
