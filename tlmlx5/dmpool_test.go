package tlmlx5

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// poolOf is the device-memory pool of a fake team's context.
func poolOf(ft *fakeTeam) *dm.Pool { return ft.ctx.(*context).pool }

// TestCtlBlocksInHostMemory: a peer's control block (its receive slots) is
// registered host memory even where the context's pool is device memory: mlx5's
// library copies small sends into the receive buffer with the CPU (scatter to CQE),
// which an offset into device memory would turn into a write below 64 KiB
// (ctlblock.go). Linking a 2-rank and a 4-rank team on one context takes nothing of
// the pool, every receive posted points into the block's host memory, control
// messages flow both ways and read back what was sent, and a DM buffer of the whole
// pool still fits once every link has its block.
func TestCtlBlocksInHostMemory(t *testing.T) {
	t.Run("device memory", checkCtlBlocks)
	t.Run("no device memory", func(t *testing.T) { withoutSoftDM(t, checkCtlBlocks) })
}

// withoutSoftDM runs f with soft0 short of device memory, as rxe is: the pools opened
// meanwhile are host memory.
func withoutSoftDM(t *testing.T, f func(t *testing.T)) {
	ctl, err := verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctl.Close()) }()
	soft, err := verbs.SoftControl(ctl)
	require.NoError(t, err)
	prev, err := soft.SetDMCapacity(0)
	require.NoError(t, err)
	defer func() { _, err := soft.SetDMCapacity(prev); require.NoError(t, err) }()
	f(t)
}

func checkCtlBlocks(t *testing.T) {
	rnd := testutil.Rand(t)
	small := newFakeTeam(t, 2, nil)
	pool := poolOf(small)
	base := pool.Used()
	big := &fakeTeam{n: 4, ctx: small.ctx, next: make([]uint64, 4), msgs: &fakeMessages{close: map[int]bool{}}}
	addrs := make([][]byte, big.n)
	for r := 0; r < big.n; r++ {
		ep, addr, err := big.ctx.NewEndpoint(driver.TeamParams{Rank: r, Size: big.n, NextSeq: func() uint64 { return big.next[r] },
			Messenger: fakeMessenger{m: big.msgs, rank: r}})
		require.NoError(t, err)
		big.eps = append(big.eps, ep)
		big.hs = append(big.hs, &ctlRecorder{from: make([][][]byte, big.n)})
		addrs[r] = addr
	}
	for r, ep := range big.eps {
		require.NoError(t, ep.Connect(addrs), "Connect rank %d", r)
		require.Empty(t, ep.(*team).linked, "nothing is linked at Connect")
	}
	for _, ft := range []*fakeTeam{small, big} {
		sent := map[[2]int][]byte{}
		for from := range ft.eps {
			for to := range ft.eps {
				if from != to {
					msg := make([]byte, 1+rnd.IntN(ft.eps[from].MaxCtl()))
					testutil.Fill(rnd, msg)
					require.NoError(t, ft.eps[from].SendCtl(to, msg))
					sent[[2]int{from, to}] = msg
				}
			}
		}
		require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
			for k := range sent {
				if len(ft.hs[k[1]].from[k[0]]) == 0 {
					return false
				}
			}
			return true
		}))
		for k, msg := range sent {
			require.True(t, bytes.Equal(msg, ft.hs[k[1]].from[k[0]][0]), "%d -> %d", k[0], k[1])
		}
	}
	blocks := 0
	for _, ft := range []*fakeTeam{small, big} {
		for r, ep := range ft.eps {
			for _, pe := range ep.(*team).linked {
				require.NotNil(t, pe.cb.buf, "rank %d's block for rank %d is host memory", r, pe.rank)
				require.NotSame(t, pool.MR(), pe.cb.mr, "rank %d's block for rank %d is not in the pool", r, pe.rank)
				lo := uint64(pe.cb.buf.Addr())
				require.Equal(t, lo, pe.cb.addr(0), "the block's receives address its host memory")
				for _, wr := range pe.recvs {
					for _, sge := range wr.SGE {
						require.Equal(t, pe.cb.mr.LKey(), sge.LKey)
						require.True(t, sge.Addr >= lo && sge.Addr+uint64(sge.Length) <= lo+uint64(len(pe.cb.mem)),
							"receive at %#x+%d outside the block [%#x, +%d)", sge.Addr, sge.Length, lo, len(pe.cb.mem))
					}
				}
				blocks++
			}
		}
	}
	require.Equal(t, 2+4*3, blocks, "every rank linked every peer")
	require.Equal(t, base, pool.Used(), "control blocks take nothing of the pool")
	if pool.Kind() == dm.KindDM {
		b, err := small.ctx.(*context).AllocDM(pool.Capacity() - base)
		require.NoError(t, err, "a DM buffer of the whole free pool, once every link has its block")
		require.NoError(t, b.Close())
	}
	for _, ep := range big.eps {
		require.NoError(t, ep.Close())
	}
}

// TestDMBuffersInPlace: a gather whose buffers are DM of the context's pool runs
// through the pool's MR (no memory registration is made) and moves the right bytes,
// including the root's own block (a local copy out of and into device memory). A
// reduction over DM is refused naming the argument, and so is a DM buffer of another
// context.
func TestDMBuffersInPlace(t *testing.T) {
	t.Run("device memory", checkDMInPlace)
	t.Run("no device memory", func(t *testing.T) { withoutSoftDM(t, checkDMInPlace) })
}

func checkDMInPlace(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newFakeTeam(t, n, nil)
	if poolOf(ft).Kind() != dm.KindDM {
		require.False(t, ft.ctx.Reach().NICReaches(mem.DM), "DM is reached only through a device-memory pool")
		_, err := ft.ctx.(*context).AllocDM(64)
		require.ErrorIs(t, err, driver.ErrNotSupported)
		t.Logf("the pool is %s memory here: DM user buffers are staged (coll's TestReachContractDMStaged checks that)", poolOf(ft).Kind())
		return
	}
	require.True(t, ft.ctx.Reach().NICReaches(mem.DM))
	const blk, root = 1000, 1 // not a multiple of 4: partial words at the edges
	alloc := func(size int) *mem.Buffer {
		b, err := ft.ctx.(*context).AllocDM(size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	}
	src := []*mem.Buffer{alloc(blk), alloc(blk)}
	dst := alloc(n * blk)
	in := make([][]byte, n)
	for r := range in {
		in[r] = make([]byte, blk)
		testutil.Fill(rnd, in[r])
		require.NoError(t, src[r].Region().CopyTo(0, in[r]))
	}
	dbuf := func(b *mem.Buffer, count int) driver.Buf {
		return driver.Buf{Type: mem.DM, Buf: b, Addr: b.Addr(), Bytes: count, Count: count}
	}
	seq := ft.newSeq()
	mrs := verbs.LiveObjects()["mr"]
	tasks := make([]driver.Task, n)
	for r := range tasks {
		spec := &driver.TaskSpec{Seq: seq, Type: collective.Gather, Root: root, DType: collective.Uint8, Block: blk, Persistent: true,
			Src: dbuf(src[r], blk)}
		if r == root {
			spec.Dst = dbuf(dst, n*blk)
		}
		k, err := ft.newTask(r, spec)
		require.NoError(t, err, "rank %d", r)
		tasks[r] = k
	}
	require.Equal(t, mrs, verbs.LiveObjects()["mr"], "DM buffers are used through the pool's MR, not registered")
	for post := uint32(1); post <= 2; post++ {
		ft.run(t, tasks, post)
		got := make([]byte, n*blk)
		require.NoError(t, dst.Region().CopyFrom(got, 0))
		require.Equal(t, bytes.Join(in, nil), got, "post %d", post)
	}
	ft.quiesce(t, tasks)
	closeTasks(t, tasks)

	_, err := ft.newTask(0, &driver.TaskSpec{Seq: ft.newSeq(), Type: collective.Allreduce, DType: collective.Uint8, Op: collective.OpSum,
		Block: blk, Src: dbuf(src[0], blk), Dst: dbuf(src[1], blk)})
	require.ErrorIs(t, err, driver.ErrNotSupported)
	require.ErrorContains(t, err, "Args.Src")

	other := openSoft(t)
	defer func() { require.NoError(t, other.Close()) }()
	if other.(*context).pool.Kind() == dm.KindDM {
		foreign, err := other.(*context).AllocDM(blk)
		require.NoError(t, err)
		defer func() { require.NoError(t, foreign.Close()) }()
		_, err = ft.newTask(0, &driver.TaskSpec{Seq: ft.newSeq(), Type: collective.Gather, Root: 0, DType: collective.Uint8,
			Block: blk, Src: dbuf(foreign, blk), Dst: dbuf(dst, n*blk)})
		require.ErrorIs(t, err, driver.ErrInvalid)
		require.ErrorContains(t, err, "another context")
		_, err = ft.eps[0].Register(foreign)
		require.ErrorIs(t, err, driver.ErrInvalid)
	}
}

// TestPoolFallsBack: a device whose memory fails (here an injected failure of the DM's
// registration) gives a pool of host memory, and the reach says why and leaves DM out;
// a negative capacity is refused naming the field.
func TestPoolFallsBack(t *testing.T) {
	ctx, err := verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Close()) }()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer func() { require.NoError(t, pd.Close()) }()
	_, _, err = openPool(ctx, pd, -1)
	require.ErrorIs(t, err, driver.ErrInvalid)
	require.ErrorContains(t, err, "DMCapacity")

	soft, err := verbs.SoftControl(ctx)
	require.NoError(t, err)
	require.NoError(t, soft.FailNth(verbs.FaultRegMR, 1))
	p, why, err := openPool(ctx, pd, 16<<10)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	require.Equal(t, dm.KindHost, p.Kind())
	require.Contains(t, why, "reg-mr fault")
	var r mem.Reach
	addPoolReach(&r, p, why, true)
	require.False(t, r.NICReaches(mem.DM))
	require.Contains(t, r.Notes, why)
}
