package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

func TestSmokeGather(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		w := newWorld(t, n, coll.Config{Timeout: 5 * time.Second})
		rnd := testutil.Rand(t)
		const cnt = 1000
		srcs := make([][]byte, n)
		for i := range srcs {
			srcs[i] = make([]byte, cnt)
			testutil.Fill(rnd, srcs[i])
		}
		dst := make([]byte, n*cnt)
		root := n - 1
		w.mustRun(func(r *rank) error {
			a := coll.Args{Type: coll.Gather, Root: root, DType: coll.Uint8,
				Src: coll.BufferDesc{Slice: srcs[r.r], Count: cnt}}
			if r.r == root {
				a.Dst = coll.BufferDesc{Slice: dst, Count: n * cnt}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return runColl(ctx, r.team, a)
		})
		for i := range srcs {
			testutil.Equal(t, srcs[i], dst[i*cnt:(i+1)*cnt], "block")
		}
		require.True(t, true)
	}
}
