package dm_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// battery runs the checks every pool must pass, whatever backs it. Each
// check gets a fresh, empty pool from newPool.
func battery(t *testing.T, newPool func(t *testing.T) *dm.Pool) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, p *dm.Pool)
	}{
		{"carve", testCarve},
		{"coalesce", testCoalesce},
		{"double-close", testDoubleClose},
		{"unaligned", testUnaligned},
		{"args", testArgs},
		{"mem", testMemAllocator},
		{"concurrent", testConcurrent},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newPool(t)) })
	}
}

func TestBattery(t *testing.T) {
	forEachKind(t, func(t *testing.T, ctx *verbs.Context, pd *verbs.PD, k poolKind) {
		battery(t, func(t *testing.T) *dm.Pool {
			p := newPool(t, ctx, pd, dm.Config{})
			require.Equal(t, k.name, p.Kind())
			require.Equal(t, dm.DefaultCapacity, p.Capacity())
			require.Equal(t, dm.DefaultAlign, p.Align())
			return p
		})
	})
}

func TestBatteryAlign(t *testing.T) {
	for _, align := range []int{4, 8, 4096, 64 << 10} {
		t.Run(strconv.Itoa(align), func(t *testing.T) {
			forEachKind(t, func(t *testing.T, ctx *verbs.Context, pd *verbs.PD, k poolKind) {
				battery(t, func(t *testing.T) *dm.Pool {
					p := newPool(t, ctx, pd, dm.Config{Align: align})
					require.Equal(t, k.name, p.Kind())
					require.Equal(t, align, p.Align())
					return p
				})
			})
		})
	}
}

func roundUp(n, a int) int { return (n + a - 1) &^ (a - 1) }

// requireChunk checks what every chunk promises about its placement.
func requireChunk(t *testing.T, p *dm.Pool, c *dm.Chunk, n int) {
	t.Helper()
	require.Equal(t, n, c.Len())
	require.Zero(t, c.Offset()%p.Align(), "offset %d not aligned to %d", c.Offset(), p.Align())
	require.LessOrEqual(t, c.Offset()+roundUp(n, p.Align()), p.Capacity())
	require.Equal(t, p.MR().Addr()+uint64(c.Offset()), c.Addr())
	require.Zero(t, c.Addr()%uint64(min(p.Align(), 4096)), "address %#x not aligned", c.Addr())
	require.Equal(t, p.MR().LKey(), c.LKey())
	require.Equal(t, p.MR().RKey(), c.RKey())
	require.Same(t, p, c.Pool())
	if p.Kind() == dm.KindDM {
		require.Zero(t, p.MR().Addr(), "a DM MR is zero-based")
	}
}

func requireExhausted(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, dm.ErrExhausted)
	require.ErrorIs(t, err, unix.ENOMEM)
}

// testCarve fills the pool with chunks of random sizes, proves they do
// not overlap by writing distinct data to each and reading all of it
// back, frees them in random order, and then takes the whole pool as one
// chunk again.
func testCarve(t *testing.T, p *dm.Pool) {
	r := testutil.Rand(t)
	type held struct {
		c    *dm.Chunk
		data []byte
	}
	var hs []held
	used := 0
	for {
		n := 1 + r.IntN(max(p.Capacity()/16, 1))
		if r.IntN(4) == 0 {
			n = 1 + r.IntN(16) // small odd sizes too
		}
		c, err := p.AllocChunk(n)
		if err != nil {
			requireExhausted(t, err)
			break
		}
		t.Cleanup(func() { _ = c.Close() })
		requireChunk(t, p, c, n)
		used += roundUp(n, p.Align())
		require.Equal(t, used, p.Used())
		hs = append(hs, held{c: c})
	}
	require.NotEmpty(t, hs)
	t.Logf("%d chunks, %d of %d bytes used", len(hs), p.Used(), p.Capacity())

	sorted := append([]held(nil), hs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].c.Offset() < sorted[j].c.Offset() })
	for i := 1; i < len(sorted); i++ {
		prev, cur := sorted[i-1].c, sorted[i].c
		require.LessOrEqual(t, prev.Offset()+roundUp(prev.Len(), p.Align()), cur.Offset(), "chunks overlap")
	}

	for i := range hs {
		hs[i].data = make([]byte, hs[i].c.Len())
		testutil.Fill(r, hs[i].data)
		require.NoError(t, hs[i].c.CopyTo(0, hs[i].data))
	}
	for _, h := range hs {
		got := make([]byte, h.c.Len())
		require.NoError(t, h.c.CopyFrom(got, 0))
		testutil.Equal(t, h.data, got, "chunk at offset "+strconv.Itoa(h.c.Offset()))
	}

	r.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
	for _, h := range hs {
		require.NoError(t, h.c.Close())
		used -= roundUp(h.c.Len(), p.Align())
		require.Equal(t, used, p.Used())
	}
	require.Zero(t, p.Used())

	all := alloc(t, p, p.Capacity())
	require.Zero(t, all.Offset())
	_, err := p.AllocChunk(1)
	requireExhausted(t, err)
	require.NoError(t, all.Close())
}

// testCoalesce frees chunks around a hole in the order that needs both
// merges (with the block before and the block after).
func testCoalesce(t *testing.T, p *dm.Pool) {
	q := p.Capacity() / 4 &^ (p.Align() - 1)
	if q == 0 {
		t.Skip("pool too small to quarter")
	}
	var cs [4]*dm.Chunk
	for i := range cs {
		n := q
		if i == 3 {
			n = p.Capacity() - 3*q
		}
		cs[i] = alloc(t, p, n)
		require.Equal(t, i*q, cs[i].Offset())
	}
	require.NoError(t, cs[0].Close())
	require.NoError(t, cs[2].Close())
	_, err := p.AllocChunk(q + 1)
	requireExhausted(t, err)
	require.NoError(t, cs[1].Close()) // joins 0 and 2
	big := alloc(t, p, 3*q)
	require.Zero(t, big.Offset())
	require.NoError(t, big.Close())
	require.NoError(t, cs[3].Close()) // joins with everything before it
	alloc(t, p, p.Capacity())
}

// testDoubleClose proves a second Close frees nothing: were the range
// on the free list twice, the pool would hand out more than it has.
func testDoubleClose(t *testing.T, p *dm.Pool) {
	c := alloc(t, p, p.Capacity()/2)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	require.Zero(t, p.Used())
	all := alloc(t, p, p.Capacity())
	require.NoError(t, c.Close())
	_, err := p.AllocChunk(1)
	requireExhausted(t, err)
	require.Equal(t, p.Capacity(), p.Used())
	require.NoError(t, all.Close())
	require.Zero(t, p.Used())
}

// testUnaligned writes and reads every (offset mod 4, length mod 4) pair
// and random ranges inside a chunk of odd length that sits between two
// others, keeping a mirror of what the chunk must hold; the neighbours'
// bytes must survive every read-modify-write.
func testUnaligned(t *testing.T, p *dm.Pool) {
	r := testutil.Rand(t)
	const n = 61
	left, mid, right := alloc(t, p, 16), alloc(t, p, n), alloc(t, p, 16)
	leftData, rightData, mirror := make([]byte, 16), make([]byte, 16), make([]byte, n)
	for _, x := range []struct {
		c *dm.Chunk
		b []byte
	}{{left, leftData}, {mid, mirror}, {right, rightData}} {
		testutil.Fill(r, x.b)
		require.NoError(t, x.c.CopyTo(0, x.b))
	}
	requireMirror := func(what string) {
		t.Helper()
		got := make([]byte, n)
		require.NoError(t, mid.CopyFrom(got, 0))
		testutil.Equal(t, mirror, got, what)
	}
	write := func(off, length int) {
		t.Helper()
		data := make([]byte, length)
		testutil.Fill(r, data)
		require.NoError(t, mid.CopyTo(off, data), "CopyTo(%d, %d bytes)", off, length)
		copy(mirror[off:], data)
		requireMirror("after CopyTo(" + strconv.Itoa(off) + ", " + strconv.Itoa(length) + " bytes)")
		got := make([]byte, length)
		require.NoError(t, mid.CopyFrom(got, off))
		testutil.Equal(t, data, got, "CopyFrom at the same range")
	}
	for om := 0; om < 4; om++ {
		for lm := 0; lm < 4; lm++ {
			for _, words := range []int{0, 1, 3} {
				write(8+om, 4*words+lm)
			}
		}
	}
	// The chunk's last bytes: its length is not a multiple of 4.
	for length := 0; length <= 8; length++ {
		write(n-length, length)
	}
	for range 200 {
		off := r.IntN(n + 1)
		write(off, r.IntN(n-off+1))
		// A random read of what is there, unaligned at both ends.
		ro := r.IntN(n + 1)
		got := make([]byte, r.IntN(n-ro+1))
		require.NoError(t, mid.CopyFrom(got, ro))
		testutil.Equal(t, mirror[ro:ro+len(got)], got, "random CopyFrom")
	}
	for _, x := range []struct {
		c    *dm.Chunk
		want []byte
	}{{left, leftData}, {right, rightData}} {
		got := make([]byte, 16)
		require.NoError(t, x.c.CopyFrom(got, 0))
		testutil.Equal(t, x.want, got, "neighbour chunk")
	}
}

func testArgs(t *testing.T, p *dm.Pool) {
	for _, n := range []int{0, -1} {
		_, err := p.AllocChunk(n)
		require.ErrorIs(t, err, verbs.ErrInvalid)
		require.ErrorContains(t, err, "size")
	}
	_, err := p.AllocChunk(p.Capacity() + 1)
	requireExhausted(t, err)
	var a mem.Allocator = p
	r, err := a.Alloc(0)
	require.Error(t, err)
	require.Nil(t, r, "a failed Alloc must return a nil interface")

	const n = 10
	c := alloc(t, p, n)
	b := make([]byte, 4)
	for _, tc := range []struct {
		name string
		err  error
		word string
	}{
		{"CopyTo off<0", c.CopyTo(-1, b), "off"},
		{"CopyTo off>len", c.CopyTo(n+1, nil), "off"},
		{"CopyTo overrun", c.CopyTo(n-3, b), "src"},
		{"CopyFrom off<0", c.CopyFrom(b, -4), "off"},
		{"CopyFrom off>len", c.CopyFrom(nil, n+1), "off"},
		{"CopyFrom overrun", c.CopyFrom(b, n-1), "dst"},
		{"nil chunk CopyTo", (*dm.Chunk)(nil).CopyTo(0, b), "nil Chunk"},
		{"nil chunk CopyFrom", (*dm.Chunk)(nil).CopyFrom(b, 0), "nil Chunk"},
	} {
		require.ErrorIs(t, tc.err, verbs.ErrInvalid, tc.name)
		require.ErrorContains(t, tc.err, tc.word, tc.name)
	}
	require.NoError(t, c.CopyTo(n, nil), "an empty copy at the end is in range")
	require.NoError(t, c.CopyFrom(b[:0], n))
	require.NoError(t, c.CopyTo(n-4, b))

	require.NoError(t, c.Close())
	require.ErrorIs(t, c.CopyTo(0, b), verbs.ErrClosed)
	require.ErrorIs(t, c.CopyFrom(b, 0), verbs.ErrClosed)
	require.NoError(t, (*dm.Chunk)(nil).Close())
}

// testMemAllocator uses the pool as mem's DM allocator, copying between
// host buffers and a DM buffer at unaligned offsets.
func testMemAllocator(t *testing.T, p *dm.Pool) {
	r := testutil.Rand(t)
	const n = 1000
	d, err := mem.AllocFrom(mem.DM, p, n)
	require.NoError(t, err)
	closeLater(t, d)
	require.Equal(t, roundUp(n, p.Align()), p.Used())
	src, err := mem.Alloc(mem.Host, n)
	require.NoError(t, err)
	closeLater(t, src)
	dst, err := mem.Alloc(mem.Host, n)
	require.NoError(t, err)
	closeLater(t, dst)
	testutil.Fill(r, src.Bytes())
	testutil.Fill(r, dst.Bytes())
	require.NoError(t, mem.Copy(d, 3, src, 5, n-7))
	require.NoError(t, mem.Copy(dst, 1, d, 3, n-7))
	testutil.Equal(t, src.Bytes()[5:n-2], dst.Bytes()[1:n-6], "host -> dm -> host")
	require.NoError(t, d.Close())
	require.Zero(t, p.Used())
}

// testConcurrent allocates, copies and frees from several goroutines;
// under -race it checks the pool's locking.
func testConcurrent(t *testing.T, p *dm.Pool) {
	r := testutil.Rand(t)
	const workers, rounds = 8, 50
	seeds := make([]uint64, workers)
	for i := range seeds {
		seeds[i] = r.Uint64()
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- worker(p, seeds[w], rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, p.Used())
}

func worker(p *dm.Pool, seed uint64, rounds int) error {
	r := rand.New(rand.NewPCG(seed, ^seed))
	for range rounds {
		n := 1 + r.IntN(p.Capacity()/32)
		c, err := p.AllocChunk(n)
		if errors.Is(err, dm.ErrExhausted) {
			continue
		}
		if err != nil {
			return err
		}
		want := make([]byte, n)
		testutil.Fill(r, want)
		off := r.IntN(min(4, n+1))
		if err := c.CopyTo(off, want[off:]); err != nil {
			return errors.Join(err, c.Close())
		}
		got := make([]byte, n-off)
		if err := c.CopyFrom(got, off); err != nil {
			return errors.Join(err, c.Close())
		}
		if i := testutil.FirstDiff(want[off:], got); i >= 0 {
			return errors.Join(fmt.Errorf("chunk at %d: data differs at byte %d", c.Offset(), off+i), c.Close())
		}
		if err := c.Close(); err != nil {
			return err
		}
	}
	return nil
}
