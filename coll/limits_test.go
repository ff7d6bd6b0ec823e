package coll_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// Regressions of the held-out adversarial pass (issue 13): sizes and displacements
// that must be refused, or accepted, before anything is built.

// TestStagedVIgnoresEmptyDispls (defect 3): counts [8,0,5] with displacements
// [0, 1<<36, 9] and a root buffer in sim memory: the empty block's displacement is
// no part of the buffer, so the staged scratch is 14 elements, as on host memory, and
// the data arrives at its displacements; scatterv likewise.
func TestStagedVIgnoresEmptyDispls(t *testing.T) {
	const n = 3
	counts, displs := []int{8, 0, 5}, []int{0, 1 << 36, 9}
	const extent = 14
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: time.Minute})
	for _, typ := range []coll.CollType{coll.Gatherv, coll.Scatterv} {
		for _, how := range []string{"host Buf", "sim Buf", "sim Addr"} {
			rootMem := mem.Sim
			if how == "host Buf" {
				rootMem = mem.Host
			}
			root, err := mem.Alloc(rootMem, extent)
			require.NoError(t, err)
			t.Cleanup(func() { _ = root.Close() })
			in := make([][]byte, n)
			out := make([][]byte, n)
			rootIn := make([]byte, extent)
			testutil.Fill(rnd, rootIn)
			writeMem(t, root.Addr(), rootMem, rootIn)
			for r := range n {
				in[r] = make([]byte, max(counts[r], 1))
				out[r] = make([]byte, max(counts[r], 1))
				testutil.Fill(rnd, in[r])
			}
			errs := w.run(func(rk *rank) error {
				r := rk.r
				a := coll.Args{Type: typ, Root: 0, DType: coll.Uint8}
				v := coll.BufferDesc{Buf: root, Type: rootMem, Counts: counts, Displs: displs}
				if how == "sim Addr" {
					v = coll.BufferDesc{Addr: root.Addr(), Type: rootMem, Counts: counts, Displs: displs}
				}
				switch typ {
				case coll.Gatherv:
					a.Src = coll.BufferDesc{Slice: in[r], Count: counts[r]}
					if r == 0 {
						a.Dst = v
					}
				case coll.Scatterv:
					a.Dst = coll.BufferDesc{Slice: out[r], Count: counts[r]}
					if r == 0 {
						a.Src = v
					}
				}
				return rk.team.Run(context.Background(), a)
			})
			for r, err := range errs {
				require.NoError(t, err, "%v, root %s, rank %d", typ, how, r)
			}
			got := readMem(t, root.Addr(), rootMem, extent)
			for r := range n {
				if counts[r] == 0 {
					continue
				}
				blk := got[displs[r] : displs[r]+counts[r]]
				if typ == coll.Gatherv {
					testutil.Equal(t, in[r][:counts[r]], blk, fmt.Sprintf("gatherv block of rank %d", r))
				} else {
					testutil.Equal(t, rootIn[displs[r]:displs[r]+counts[r]], out[r][:counts[r]], fmt.Sprintf("scatterv block of rank %d", r))
				}
			}
		}
	}
}

// TestCountLimits (defect 4): n × Count that overflows, and a Count whose bytes no
// process can hold, are refused at Init with ErrInvalid naming the field, on every
// rank, before anything is built (a raw address with Count 2^62 used to make Init
// build about 4 billion work requests).
func TestCountLimits(t *testing.T) {
	const n = 4
	w := newWorld(t, n, coll.Config{Timeout: time.Minute})
	small := make([]byte, 64)
	addr := uintptr(unsafe.Pointer(&small[0]))
	cases := []struct {
		name  string
		args  func(r int) coll.Args
		field string
	}{
		{"allgather n×Count overflows", func(int) coll.Args {
			return coll.Args{Type: coll.Allgather, DType: coll.Uint8,
				Src: coll.BufferDesc{Addr: addr, Count: 1 << 62}, Dst: coll.BufferDesc{Addr: addr, Count: 0}}
		}, "Args.Src.Count"},
		{"bcast Count beyond MaxBytes", func(int) coll.Args {
			return coll.Args{Type: coll.Bcast, DType: coll.Uint8, Src: coll.BufferDesc{Addr: addr, Count: 1 << 62}}
		}, "Args.Src.Count"},
		{"allreduce bytes beyond MaxBytes", func(int) coll.Args {
			return coll.Args{Type: coll.Allreduce, DType: coll.Float64, Op: coll.OpSum,
				Src: coll.BufferDesc{Addr: addr, Count: collective.MaxBytes/8 + 1}, Dst: coll.BufferDesc{Addr: addr, Count: collective.MaxBytes/8 + 1}}
		}, "Args."},
		{"gatherv displacement beyond MaxBytes", func(r int) coll.Args {
			a := coll.Args{Type: coll.Gatherv, DType: coll.Uint8, Src: coll.BufferDesc{Slice: small, Count: 1}}
			if r == 0 {
				a.Dst = coll.BufferDesc{Addr: addr, Counts: []int{1, 1, 1, 1}, Displs: []int{0, 1, collective.MaxBytes, 2}}
			}
			return a
		}, "Args.Dst.Displs[2]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := w.run(func(rk *rank) error {
				req, err := rk.team.Init(c.args(rk.r))
				if err != nil {
					return err
				}
				// A rank whose own arguments are fine (a gatherv's non-root) learns at
				// its post that the collective failed elsewhere.
				return errors.Join(req.Post(), req.Wait(context.Background()), req.Close())
			})
			for r, err := range errs {
				if r != 0 && c.field == "Args.Dst.Displs[2]" {
					require.ErrorIs(t, err, coll.ErrPeerFailed, "rank %d", r)
					continue
				}
				require.ErrorIs(t, err, coll.ErrInvalid, "rank %d", r)
				require.ErrorContains(t, err, c.field, "rank %d", r)
			}
			w.mustRun(func(rk *rank) error { return rk.team.Barrier(context.Background()) })
		})
	}
}

// TestEmptyBlockDisplsNearMaxInt (defect 5): an empty block's displacement may be
// anything, MaxInt included, and argument errors of asym wrap coll.ErrInvalid (the
// sentinel is shared): a count whose bytes overflow, a displacement past MaxInt.
func TestEmptyBlockDisplsNearMaxInt(t *testing.T) {
	l, err := collective.Gatherv.Layout(collective.Args{Rank: 0, Size: 3, DTypeSize: 4,
		Src: collective.Buf{Count: 2}, Dst: collective.Buf{Counts: []int{2, 0, 3}, Displs: []int{0, math.MaxInt, 2}}})
	require.NoError(t, err, "an empty block's displacement is not part of the buffer")
	require.Equal(t, 5, l.Dst.Elems)
	for _, bad := range []asym.Args{
		{Coll: collective.Bcast, Size: 2, DtypeSize: 8, Src: asym.Buf{Type: mem.Sim, Count: math.MaxInt / 4}},
		{Coll: collective.Gatherv, Size: 2, DtypeSize: 4, Src: asym.Buf{Type: mem.Sim, Count: 1},
			Dst: asym.Buf{Type: mem.Sim, Counts: []int{1, 1}, Displs: []int{0, math.MaxInt - 1}}},
	} {
		_, err := asym.Plan(bad, mem.Reach{NIC: []mem.Type{mem.Host}, CPU: []mem.Type{mem.Host}})
		require.ErrorIs(t, err, coll.ErrInvalid)
		require.True(t, errors.Is(err, asym.ErrInvalid))
		require.ErrorContains(t, err, "Args.")
	}
	s, err := asym.Plan(asym.Args{Coll: collective.Gatherv, Size: 3, DtypeSize: 4, Src: asym.Buf{Type: mem.Host, Count: 2},
		Dst: asym.Buf{Type: mem.Sim, Counts: []int{2, 0, 3}, Displs: []int{0, math.MaxInt, 2}}},
		mem.Reach{NIC: []mem.Type{mem.Host}, CPU: []mem.Type{mem.Host}})
	require.NoError(t, err)
	require.Equal(t, 5*4, s.Dst.Bytes, "the scratch ignores the empty block")
}

// TestAbortGraceBound (defect 7): graces of 1-30 ms split outcomes (a live peer that
// did not poll in time was cut off, breaking the team under a post another rank had
// reported done); graces below MinAbortGrace are refused with ErrInvalid naming
// Config.AbortGrace and the bound, and the bound itself is accepted.
func TestAbortGraceBound(t *testing.T) {
	for _, g := range []time.Duration{time.Nanosecond, time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, coll.MinAbortGrace - 1} {
		_, err := coll.NewContext(coll.Config{Device: device(), AbortGrace: g})
		require.ErrorIs(t, err, coll.ErrInvalid, "%v", g)
		require.ErrorContains(t, err, "Config.AbortGrace")
		require.ErrorContains(t, err, coll.MinAbortGrace.String())
	}
	for _, g := range []time.Duration{0, coll.MinAbortGrace, time.Second} {
		c, err := coll.NewContext(coll.Config{Device: device(), AbortGrace: g})
		require.NoError(t, err, "%v", g)
		require.NoError(t, c.Close())
	}
}
