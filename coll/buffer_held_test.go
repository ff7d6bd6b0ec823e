package coll_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestArgsBuffersHeldUntilClose: a mem.Buffer in a request's arguments cannot be
// closed until the request is: its Close fails with ErrBusy and leaves the buffer
// whole, so that a later post still moves the right bytes into it, and nothing else
// allocated meanwhile takes its memory (before, a closed DM buffer's chunk went to the
// next AllocDM and the old request's posts overwrote it; a closed host buffer crashed
// the process at the next post). Closing the request lets the buffer go; so does an
// Init that fails after it took the buffer, and InitInto's reuse of a closed request.
func TestArgsBuffersHeldUntilClose(t *testing.T) {
	const n = 3
	w := newWorld(t, n, coll.Config{})
	rnd := testutil.Rand(t)
	types := []mem.Type{mem.Host, mem.Sim}
	if b, err := w.ranks[0].ctx.AllocDM(64); err == nil {
		require.NoError(t, b.Close())
		types = append(types, mem.DM)
	} else {
		t.Logf("%s gives no device memory (%v): host and sim only", device(), err)
	}
	const blk = 512
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			bufs := make([]*mem.Buffer, n)
			reqs := make([]*coll.Request, n)
			alloc := func(r *rank) *mem.Buffer {
				var b *mem.Buffer
				var err error
				if typ == mem.DM {
					b, err = r.ctx.AllocDM(n * blk)
				} else {
					b, err = mem.Alloc(typ, n*blk)
				}
				require.NoError(t, err)
				return b
			}
			srcs := make([][]byte, n)
			for _, r := range w.ranks {
				bufs[r.r] = alloc(r)
				srcs[r.r] = make([]byte, blk)
			}
			// A persistent gather into each root's typed buffer (root 0 holds it as
			// Dst); the other ranks hold theirs as Src, of one block.
			w.mustRun(func(r *rank) error {
				a := coll.Args{Type: coll.Gather, DType: coll.Uint8, Flags: coll.Persistent,
					Src: coll.BufferDesc{Slice: srcs[r.r], Count: blk}}
				if r.r == 0 {
					a.Dst = coll.BufferDesc{Buf: bufs[0], Count: n * blk}
				} else {
					a.Src = coll.BufferDesc{Buf: bufs[r.r], Count: blk}
				}
				q, err := r.team.Init(a)
				reqs[r.r] = q
				return err
			})
			for r, b := range bufs {
				err := b.Close()
				require.ErrorIs(t, err, coll.ErrBusy, "rank %d closes a buffer its request holds", r)
				require.ErrorContains(t, err, "until its Close")
			}
			// Something allocated now must not get the held memory.
			other := alloc(w.ranks[0])
			for post := 0; post < 2; post++ {
				want := make([]byte, n*blk)
				testutil.Fill(rnd, want)
				for r := range n {
					block := want[r*blk : (r+1)*blk]
					if r == 0 {
						copy(srcs[0], block)
						continue
					}
					host, err := mem.Alloc(mem.Host, blk)
					require.NoError(t, err)
					copy(host.Bytes(), block)
					require.NoError(t, mem.Copy(bufs[r], 0, host, 0, blk))
					require.NoError(t, host.Close())
				}
				fence := make([]byte, n*blk)
				testutil.Fill(rnd, fence)
				writeBuf(t, other, fence)
				w.mustRun(func(r *rank) error {
					if err := reqs[r.r].Post(); err != nil {
						return err
					}
					return reqs[r.r].Wait(context.Background())
				})
				testutil.Equal(t, want, readBuf(t, bufs[0]), "the root's held buffer")
				testutil.Equal(t, fence, readBuf(t, other), "the buffer allocated while the other was held")
			}
			require.NoError(t, other.Close())
			for r, q := range reqs {
				require.NoError(t, q.Close())
				require.NoError(t, bufs[r].Close(), "rank %d: the request's Close let the buffer go", r)
			}
		})
	}

	// A failed Init lets go of what it took (Src is taken before Dst is refused), and
	// InitInto's reuse of a closed request does not keep the old request's buffers.
	w.mustRun(func(r *rank) error {
		src, err := mem.Alloc(mem.Host, 64)
		if err != nil {
			return err
		}
		_, err = r.team.Init(coll.Args{Type: coll.Allgather, DType: coll.Uint8,
			Src: coll.BufferDesc{Buf: src, Count: 64}, Dst: coll.BufferDesc{Slice: make([]byte, 8), Count: n * 64}})
		if !errors.Is(err, coll.ErrInvalid) {
			return errors.Join(errors.New("want ErrInvalid for a short Dst"), err)
		}
		if err := src.Close(); err != nil {
			return errors.Join(errors.New("a failed Init kept its Src"), err)
		}
		a, err := mem.Alloc(mem.Host, 64)
		if err != nil {
			return err
		}
		q := new(coll.Request)
		args := coll.Args{Type: coll.Allreduce, DType: coll.Uint8, Op: coll.OpSum,
			Src: coll.BufferDesc{Buf: a, Count: 64}, Dst: coll.BufferDesc{Slice: make([]byte, 64), Count: 64}}
		if err := runInto(context.Background(), r.team, q, args); err != nil {
			return err
		}
		args.Src = coll.BufferDesc{Slice: make([]byte, 64), Count: 64}
		if err := r.team.InitInto(q, args); err != nil {
			return err
		}
		if err := a.Close(); err != nil {
			return errors.Join(errors.New("InitInto kept the closed request's buffer"), err)
		}
		return postWaitClose(context.Background(), q)
	})
}

// writeBuf fills b (any type) with p through a host bounce.
func writeBuf(t *testing.T, b *mem.Buffer, p []byte) {
	t.Helper()
	host, err := mem.Alloc(mem.Host, len(p))
	require.NoError(t, err)
	defer func() { require.NoError(t, host.Close()) }()
	copy(host.Bytes(), p)
	require.NoError(t, mem.Copy(b, 0, host, 0, len(p)))
}

// readBuf reads b (any type) back through a host bounce.
func readBuf(t *testing.T, b *mem.Buffer) []byte {
	t.Helper()
	host, err := mem.Alloc(mem.Host, b.Len())
	require.NoError(t, err)
	defer func() { require.NoError(t, host.Close()) }()
	require.NoError(t, mem.Copy(host, 0, b, 0, b.Len()))
	return append([]byte(nil), host.Bytes()...)
}

// TestFailedInitLetsBuffersGo: an Init that fails after it took the caller's Buffer
// (an unknown algorithm, refused by the transport once staging ran) and whose release
// fails too (a staging scratch's deregistration) drops its request, which no caller can
// close again: it must still let the Buffer go, since nothing was posted. Before, the
// Buffer's Close failed with ErrBusy for ever, and the request's scratch was lost (the
// package's leak check finds it). Team.Close releases it, on the retry that succeeds.
func TestFailedInitLetsBuffersGo(t *testing.T) {
	ctx, err := coll.NewContext(coll.Config{Device: device(), ScratchCache: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Close()) }()
	tm, err := ctx.NewTeam(context.Background(), coll.LocalOOB(1)[0])
	require.NoError(t, err)
	src, err := mem.Alloc(mem.Sim, 64) // staged: its scratch is registered
	require.NoError(t, err)
	restore, fired := coll.FailNextScratchDereg()
	defer restore()
	_, err = tm.Init(coll.Args{Type: coll.Allgather, DType: coll.Uint8, Alg: "nosuchalg",
		Src: coll.BufferDesc{Buf: src, Count: 64}, Dst: coll.BufferDesc{Slice: make([]byte, 64), Count: 64}})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.True(t, fired(), "the failed Init's release failed too, or this tests nothing")
	require.NoError(t, src.Close(), "the dropped request let the Buffer go")
	require.NoError(t, tm.Close(), "Team.Close releases what the failed Init built (the retry succeeds)")
}
