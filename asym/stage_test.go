package asym

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The persistence tests play one root rank of a 4-rank collective; "the transport" is
// mem.Copy between the effective buffers, and the other ranks' data is made up.
const (
	pSize  = 4
	pRoot  = 2
	pDtype = 4
	pBlock = 16 // elements per rank, plain layouts
)

var (
	pCounts = []int{3, 0, 5, 2} // gaps, unsorted displacements
	pDispls = []int{10, 0, 1, 20}
)

// block is one rank's bytes in the big buffer (scatter's source, gather's destination).
type block struct{ off, n int }

func persistLayout(c collective.Type) (blocks []block, big int) {
	for i := range pSize {
		b := block{i * pBlock * pDtype, pBlock * pDtype}
		if c == collective.Gatherv || c == collective.Scatterv {
			b = block{pDispls[i] * pDtype, pCounts[i] * pDtype}
		}
		blocks = append(blocks, b)
		big = max(big, b.off+b.n)
	}
	return blocks, big
}

// persistArgs builds the root's arguments of c with the given buffer types.
func persistArgs(c collective.Type, st, dt mem.Type) Args {
	a := Args{Coll: c, Root: pRoot, Rank: pRoot, Size: pSize, DtypeSize: pDtype,
		Src: Buf{Type: st}, Dst: Buf{Type: dt}}
	v := Buf{Counts: pCounts, Displs: pDispls}
	switch c {
	case collective.Scatter:
		a.Src.Count, a.Dst.Count = pSize*pBlock, pBlock
	case collective.Gather:
		a.Src.Count, a.Dst.Count = pBlock, pSize*pBlock
	case collective.Scatterv:
		a.Src.Counts, a.Src.Displs, a.Dst.Count = v.Counts, v.Displs, pCounts[pRoot]
	case collective.Gatherv:
		a.Src.Count, a.Dst.Counts, a.Dst.Displs = pCounts[pRoot], v.Counts, v.Displs
	}
	return a
}

// rig holds a stage with its user buffers and a host probe to read and write any type.
type rig struct {
	t          testing.TB
	src, dst   *mem.Buffer
	stage      *Stage
	regs       *fakeRegistrar
	probe      *mem.Buffer
	blocks     []block
	big, small int
	landed     bool  // postGather reports blocks to Stage.Landed as they arrive
	again      int64 // bytes it reported twice
	// outs, when set, are the transport's own output buffers (SetOutput): post i
	// writes outs[i%2], and the stage's scratch gets garbage
	outs  []*mem.Buffer
	posts int
}

type rigOpts struct {
	reach  mem.Reach
	byAddr bool // describe the user buffers by address only (the CopyPtr path)
	dm     *fakeDM
	opts   []Option
}

func newRig(t testing.TB, c collective.Type, st, dt mem.Type, o rigOpts) *rig {
	t.Helper()
	r := &rig{t: t, regs: &fakeRegistrar{}}
	r.blocks, r.big = persistLayout(c)
	r.small = r.blocks[pRoot].n
	srcLen, dstLen := r.big, r.small
	if c == collective.Gather || c == collective.Gatherv {
		srcLen, dstLen = r.small, r.big
	}
	alloc := func(typ mem.Type, n int) *mem.Buffer {
		if typ != mem.DM {
			return newBuf(t, typ, n)
		}
		b, err := mem.AllocFrom(mem.DM, o.dm, n)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	}
	r.src, r.dst = alloc(st, srcLen), alloc(dt, dstLen)
	r.probe = newBuf(t, mem.Host, r.big)
	plan, err := Plan(persistArgs(c, st, dt), o.reach)
	require.NoError(t, err)
	t.Logf("%s root, src %v, dst %v: %v", c, st, dt, plan)
	us, ud := UserBufOf(r.src), UserBufOf(r.dst)
	if o.byAddr {
		us.Buf, ud.Buf = nil, nil
	}
	opts := o.opts
	if o.dm != nil {
		opts = append(opts, WithAlloc(allocOn(o.dm)))
	}
	r.stage, err = NewStage(plan, us, ud, r.regs, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if r.stage.InFlight() { // the test failed mid-post
			_ = r.stage.Complete(errors.New("test failed"))
		}
		require.NoError(t, r.stage.Close())
		require.Zero(t, r.regs.live.Load(), "registrations left open")
	})
	return r
}

// buf maps an effective buffer back to a mem.Buffer for the transport's copies.
func (r *rig) buf(u UserBuf) *mem.Buffer {
	switch {
	case u.Buf != nil:
		return u.Buf
	case u.Addr == r.src.Addr():
		return r.src
	case u.Addr == r.dst.Addr():
		return r.dst
	}
	r.t.Fatalf("effective buffer %#x is neither a scratch nor a user buffer", u.Addr)
	return nil
}

func (r *rig) read(b *mem.Buffer, off, n int) []byte {
	require.NoError(r.t, mem.Copy(r.probe, 0, b, off, n))
	return append(make([]byte, 0, n), r.probe.Bytes()[:n]...)
}

func (r *rig) write(b *mem.Buffer, off int, p []byte) {
	copy(r.probe.Bytes(), p)
	require.NoError(r.t, mem.Copy(b, off, r.probe, 0, len(p)))
}

// postScatter runs one post of a scatter-like root and checks what every rank gets.
func (r *rig) postScatter(rng *rand.Rand) {
	t := r.t
	data := make([]byte, r.big)
	fill(rng, data)
	r.write(r.src, 0, data)
	require.NoError(t, r.stage.CopyIn())
	src, dst := r.buf(r.stage.Src()), r.buf(r.stage.Dst())
	for i, b := range r.blocks {
		require.Equal(t, data[b.off:b.off+b.n], r.read(src, b.off, b.n), "rank %d's block on the wire", i)
	}
	me := r.blocks[pRoot]
	require.NoError(t, mem.Copy(dst, 0, src, me.off, me.n))
	require.NoError(t, r.stage.Complete(nil))
	require.Equal(t, data[me.off:me.off+me.n], r.read(r.dst, 0, me.n), "root's own block")
}

// postGather runs one post of a gather-like root; want holds the user's destination as
// it must be after the post, and is updated.
func (r *rig) postGather(rng *rand.Rand, want []byte) {
	t := r.t
	mine := make([]byte, r.small)
	fill(rng, mine)
	r.write(r.src, 0, mine)
	var out *mem.Buffer
	if len(r.outs) > 0 {
		out = r.outs[r.posts%2]
		require.NoError(t, r.stage.SetOutput(out))
		junk := make([]byte, r.big)
		fill(rng, junk)
		r.write(r.buf(r.stage.Dst()), 0, junk) // never read now
	}
	r.posts++
	require.NoError(t, r.stage.CopyIn())
	src, dst := r.buf(r.stage.Src()), r.buf(r.stage.Dst())
	if out != nil {
		dst = out
	}
	for i, b := range r.blocks {
		if i == pRoot {
			require.NoError(t, mem.Copy(dst, b.off, src, 0, b.n))
			copy(want[b.off:], mine)
			continue
		}
		peer := make([]byte, b.n)
		fill(rng, peer)
		r.write(dst, b.off, peer)
		copy(want[b.off:], peer)
		if r.landed && rng.IntN(3) > 0 {
			// Some blocks land early, one of them twice, as a transport may report.
			r.stage.Landed(b.off, b.n)
			if rng.IntN(4) == 0 && b.n > 0 {
				r.stage.Landed(b.off+b.n/3, b.n-b.n/3)
				r.again += int64(b.n - b.n/3)
			}
		}
	}
	require.NoError(t, r.stage.Complete(nil))
	require.Equal(t, want, r.read(r.dst, 0, r.big), "user's dst after the post, gaps included")
}

type persistCase struct {
	coll   collective.Type
	st, dt mem.Type
	reach  string
	byAddr bool
}

func (p persistCase) String() string {
	s := fmt.Sprintf("%s/%v-to-%v/%s", p.coll, p.st, p.dt, p.reach)
	if p.byAddr {
		s += "/by-address"
	}
	return s
}

// TestStagePersistent re-posts one stage 1000 times with fresh data each time, for
// copy-in (scatter-like) and copy-out (gather-like) plans over host, sim and DM.
func TestStagePersistent(t *testing.T) {
	reaches := map[string]mem.Reach{"all": mem.AllReachable(), "default": mem.DefaultReach()}
	var cases []persistCase
	for _, c := range []collective.Type{collective.Scatter, collective.Scatterv, collective.Gather, collective.Gatherv} {
		for _, tp := range [][2]mem.Type{{mem.Sim, mem.Host}, {mem.Host, mem.Sim}, {mem.Sim, mem.Sim}, {mem.Host, mem.Host}} {
			for _, reach := range []string{"all", "default"} {
				for _, byAddr := range []bool{false, true} {
					cases = append(cases, persistCase{c, tp[0], tp[1], reach, byAddr})
				}
			}
		}
		// DM scratch (all-reachable baseline) and DM user buffers, which need Buf.
		cases = append(cases, persistCase{c, mem.DM, mem.Host, "all", false}, persistCase{c, mem.Host, mem.DM, "all", false},
			persistCase{c, mem.DM, mem.Sim, "default", false})
	}
	posts := 1000
	if testing.Short() {
		posts = 50
	}
	for _, pc := range cases {
		t.Run(pc.String(), func(t *testing.T) {
			rng := newRand(t)
			r := newRig(t, pc.coll, pc.st, pc.dt, rigOpts{reach: reaches[pc.reach], byAddr: pc.byAddr, dm: &fakeDM{}})
			scatter := pc.coll == collective.Scatter || pc.coll == collective.Scatterv
			want := make([]byte, r.big)
			if !scatter {
				fill(rng, want) // the gaps, which no post may touch
				r.write(r.dst, 0, want)
			}
			for range posts {
				if scatter {
					r.postScatter(rng)
				} else {
					r.postGather(rng, want)
				}
				require.False(t, r.stage.InFlight())
			}
		})
	}
}

// TestStageNoAllocs: a steady-state post allocates nothing.
func TestStageNoAllocs(t *testing.T) {
	r := newRig(t, collective.Gatherv, mem.Sim, mem.Sim, rigOpts{reach: mem.DefaultReach(), byAddr: true})
	require.True(t, r.stage.Staged())
	allocs := testing.AllocsPerRun(100, func() {
		if err := r.stage.CopyIn(); err != nil {
			t.Fatal(err)
		}
		if err := r.stage.Complete(nil); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// bothStaged is a plan with a copy-in source and a copy-out destination scratch.
func bothStaged(t testing.TB) (Staging, UserBuf, UserBuf) {
	plan, err := Plan(Args{Coll: collective.Alltoall, Rank: 0, Size: 2, DtypeSize: 4,
		Src: Buf{Type: mem.Sim, Count: 8}, Dst: Buf{Type: mem.Sim, Count: 8}}, mem.DefaultReach())
	require.NoError(t, err)
	require.True(t, plan.Src.Needed && plan.Src.CopyIn && plan.Dst.Needed && plan.Dst.CopyOut, "%v", plan)
	return plan, UserBufOf(newBuf(t, mem.Sim, 32)), UserBufOf(newBuf(t, mem.Sim, 32))
}

func TestStageInitFaults(t *testing.T) {
	tests := []struct {
		name  string
		f     string
		alloc AllocFunc
		reg   error
		msg   string
		is    error
	}{
		{"first alloc", "alloc@0:1", nil, nil,
			"asym: allocate src scratch, host, 32 bytes: injected fault: alloc #1", ErrInjected},
		{"second alloc", "alloc@0:2", nil, nil,
			"asym: allocate dst scratch, host, 32 bytes: injected fault: alloc #2", ErrInjected},
		{"first registration", "reg@0:1", nil, nil,
			"asym: register src scratch, host, 32 bytes: injected fault: reg #1", ErrInjected},
		{"second registration", "reg@0:2", nil, nil,
			"asym: register dst scratch, host, 32 bytes: injected fault: reg #2", ErrInjected},
		{"allocator fails", "", func(mem.Type, int) (*mem.Buffer, error) { return nil, unix.ENOMEM }, nil,
			"asym: allocate src scratch, host, 32 bytes: cannot allocate memory", unix.ENOMEM},
		{"registrar fails", "", nil, unix.EFAULT,
			"asym: register src scratch, host, 32 bytes: bad address", unix.EFAULT},
		{"allocator gives the wrong type", "", func(_ mem.Type, n int) (*mem.Buffer, error) { return mem.Alloc(mem.Sim, n) }, nil,
			"asym: allocate src scratch, host, 32 bytes: got sim, 32 bytes", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			live := mem.Live()
			plan, src, dst := bothStaged(t)
			f := faultsOf(t, tt.f)
			regs := &fakeRegistrar{fail: tt.reg}
			opts := []Option{WithFaults(f)}
			if tt.alloc != nil {
				opts = append(opts, WithAlloc(tt.alloc))
			}
			s, err := NewStage(plan, src, dst, regs, opts...)
			require.EqualError(t, err, tt.msg)
			require.ErrorIs(t, err, tt.is)
			require.Equal(t, tt.is == ErrInjected, errors.Is(err, ErrInjected))
			require.Nil(t, s)
			require.NoError(t, s.Close())
			require.Zero(t, regs.live.Load(), "registrations left")
			require.Equal(t, live+2, mem.Live(), "scratch left (the 2 user buffers live on)")
		})
	}
}

func TestStageCopyFaults(t *testing.T) {
	rng := newRand(t)
	live := mem.Live()
	f := fault.NewSet([]fault.Fault{{Kind: fault.CopyIn, N: 2}, {Kind: fault.CopyOut, N: 3}}, 0)
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.AllReachable(), opts: []Option{WithFaults(f)}})
	want := make([]byte, r.big)
	fill(rng, want)
	r.write(r.dst, 0, want)

	// collective.Gather's plan copies out only, so CopyIn counts nothing; use a copy-in stage too.
	r2 := newRig(t, collective.Scatter, mem.Sim, mem.Host, rigOpts{reach: mem.AllReachable(), opts: []Option{WithFaults(f)}})
	r2.postScatter(rng) // copy-in #1
	err := r2.stage.CopyIn()
	require.EqualError(t, err, "asym: copy-in of src (user sim to host scratch, 256 bytes): injected fault: copyin #2")
	require.ErrorIs(t, err, ErrInjected)
	require.False(t, r2.stage.InFlight(), "a failed copy-in leaves no post in flight")
	r2.postScatter(rng) // re-postable after the failure

	r.postGather(rng, want) // copy-out #1
	r.postGather(rng, want) // copy-out #2
	before := r.read(r.dst, 0, r.big)
	require.NoError(t, r.stage.CopyIn())
	err = r.stage.Complete(nil)
	require.EqualError(t, err, "asym: copy-out of dst (host scratch to user sim, 256 bytes): injected fault: copyout #3")
	require.ErrorIs(t, err, ErrInjected)
	require.False(t, r.stage.InFlight())
	require.Equal(t, before, r.read(r.dst, 0, r.big))
	r.postGather(rng, want)
	require.Equal(t, int64(4), f.Seen(fault.CopyOut))
	require.Equal(t, int64(3), f.Seen(fault.CopyIn))

	require.NoError(t, r.stage.Close())
	require.NoError(t, r2.stage.Close())
	require.Equal(t, live+6, mem.Live(), "only the user buffers and probes live on")
}

func TestStageLifecycle(t *testing.T) {
	rng := newRand(t)
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.AllReachable()})
	s := r.stage

	err := s.Complete(nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.EqualError(t, err, "asym: Complete: no post in flight")

	require.NoError(t, s.CopyIn())
	require.ErrorIs(t, s.CopyIn(), ErrBusy)
	err = s.Close()
	require.ErrorIs(t, err, ErrBusy)
	require.True(t, s.InFlight())
	require.NotZero(t, s.Dst().Addr, "a refused Close released nothing")

	// A failed collective passes through, copying nothing out.
	before := r.read(r.dst, 0, r.big)
	write := make([]byte, r.big)
	fill(rng, write)
	r.write(r.buf(s.Dst()), 0, write)
	failed := fmt.Errorf("peer 3: %w", unix.ETIMEDOUT)
	require.Same(t, failed, s.Complete(failed))
	require.Equal(t, before, r.read(r.dst, 0, r.big))

	scratch, reg := s.Dst().Buf, s.DstRegistration()
	require.NotNil(t, scratch)
	require.NotNil(t, reg)
	require.Nil(t, s.SrcRegistration())
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.Zero(t, scratch.Addr(), "scratch freed")
	require.Equal(t, []*mem.Buffer{scratch}, r.regs.order)
	require.ErrorIs(t, s.CopyIn(), ErrClosed)
	require.Equal(t, UserBuf{}, s.Dst())
	require.Nil(t, s.DstRegistration())

	var nilStage *Stage
	require.NoError(t, nilStage.Close())
}

// TestStageReleaseOrder: the destination's scratch goes first, each deregistered while
// its memory is still there (fakeReg checks), then freed.
func TestStageReleaseOrder(t *testing.T) {
	plan, src, dst := bothStaged(t)
	regs := &fakeRegistrar{}
	s, err := NewStage(plan, src, dst, regs)
	require.NoError(t, err)
	ss, ds := s.Src().Buf, s.Dst().Buf
	require.NotEqual(t, src.Addr, ss.Addr())
	require.NoError(t, s.Close())
	require.Equal(t, []*mem.Buffer{ds, ss}, regs.order)
	require.Zero(t, ss.Addr())
	require.Zero(t, ds.Addr())
	require.Zero(t, regs.live.Load())
}

// TestStageCloseRetry: a scratch whose deregistration failed is kept, memory included,
// and a second Close releases it.
func TestStageCloseRetry(t *testing.T) {
	plan, src, dst := bothStaged(t)
	live := mem.Live()
	regs := &fakeRegistrar{}
	s, err := NewStage(plan, src, dst, regs)
	require.NoError(t, err)
	regs.failClose.Store(1)
	err = s.Close()
	require.EqualError(t, err, "asym: deregister dst scratch: input/output error")
	require.ErrorIs(t, err, unix.EIO)
	require.Equal(t, live+1, mem.Live(), "the dst scratch is kept, the src one released")
	require.Equal(t, int64(1), regs.live.Load())
	require.ErrorIs(t, s.CopyIn(), ErrClosed, "no post after a Close attempt")
	require.Nil(t, s.DstRegistration())
	require.NoError(t, s.Close())
	require.Equal(t, live, mem.Live())
	require.Zero(t, regs.live.Load())
	require.NoError(t, s.Close())
}

func TestNewStageInvalid(t *testing.T) {
	plan, src, dst := bothStaged(t)
	live := mem.Live()
	short := src
	short.Len = 31
	noAddr := dst
	noAddr.Buf, noAddr.Addr = nil, 0
	wrongType := src
	wrongType.Type = mem.Host
	bad := plan
	bad.Dst.Spans = []Span{{30, 4}}
	empty := plan
	empty.Src.Spans = []Span{{0, 16}, {16, 0}}
	dmPlan, err := Plan(persistArgs(collective.Gather, mem.DM, mem.Host), mem.AllReachable())
	require.NoError(t, err)
	hostDst := UserBufOf(newBuf(t, mem.Host, pSize*pBlock*pDtype))
	hostDst.Buf = nil
	tests := []struct {
		name     string
		plan     Staging
		src, dst UserBuf
		reg      Registrar
		msg      string
		is       error
	}{
		{"nil registrar", plan, src, dst, nil, "asym: NewStage: src is staged but the Registrar is nil", ErrInvalid},
		{"short user buffer", plan, short, dst, &fakeRegistrar{}, "asym: NewStage: user src has 31 bytes, its copies reach byte 32", ErrInvalid},
		{"no address", plan, src, noAddr, &fakeRegistrar{}, "asym: NewStage: user dst has no address and no Buf", ErrInvalid},
		{"type disagrees with Buf", plan, wrongType, dst, &fakeRegistrar{}, "asym: NewStage: user src says host, 32 bytes, but its Buf is sim, 32 bytes", ErrInvalid},
		{"span outside", bad, src, dst, &fakeRegistrar{}, "asym: NewStage: dst span [30, +4) is outside its 32-byte scratch", ErrInvalid},
		{"empty span", empty, src, dst, &fakeRegistrar{}, "asym: NewStage: src span [16, +0) is outside its 32-byte scratch", ErrInvalid},
		{"dm scratch, user by address", dmPlan, UserBuf{}, hostDst, &fakeRegistrar{},
			"asym: NewStage: copies between user dst (host) and a dm scratch need UserBuf.Buf: not supported", mem.ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewStage(tt.plan, tt.src, tt.dst, tt.reg)
			require.EqualError(t, err, tt.msg)
			require.ErrorIs(t, err, tt.is)
			require.Nil(t, s)
			require.Equal(t, live+1, mem.Live())
		})
	}
	// Nothing staged: no registrar needed, and the user's buffers are the effective ones.
	s, err := NewStage(Staging{}, src, dst, nil)
	require.NoError(t, err)
	require.False(t, s.Staged())
	require.Equal(t, src, s.Src())
	require.NoError(t, s.CopyIn())
	require.NoError(t, s.Complete(nil))
	require.NoError(t, s.Close())
}

// TestStageInitInUse: Init refuses a Stage that was made and not closed, whether or
// not it holds scratch: remaking it would drop its post in flight. Once closed, it
// takes Init again.
func TestStageInitInUse(t *testing.T) {
	src, dst := UserBufOf(newBuf(t, mem.Host, 64)), UserBufOf(newBuf(t, mem.Host, 64))
	s, err := NewStage(Staging{}, src, dst, nil)
	require.NoError(t, err)
	require.NoError(t, s.CopyIn())
	err = s.Init(Staging{}, src, dst, nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "in use")
	require.True(t, s.InFlight(), "the refused Init kept the post in flight")
	require.NoError(t, s.Complete(nil))
	require.ErrorContains(t, s.Init(Staging{}, src, dst, nil), "in use", "made and not closed")
	require.NoError(t, s.Close())
	require.NoError(t, s.Init(Staging{}, src, dst, nil))
	require.NoError(t, s.Close())
}

// TestStageConcurrent: posts, completions and closes from many goroutines keep the
// rules: one post in flight, Close refused while one is, nothing after Close.
func TestStageConcurrent(t *testing.T) {
	plan, src, dst := bothStaged(t)
	regs := &fakeRegistrar{}
	s, err := NewStage(plan, src, dst, regs)
	require.NoError(t, err)
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		posts, closes int
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				if g == 0 && i > 200 {
					err := s.Close()
					if err == nil {
						mu.Lock()
						closes++
						mu.Unlock()
						continue
					}
					if !errors.Is(err, ErrBusy) {
						t.Errorf("Close: %v", err)
					}
					continue
				}
				err := s.CopyIn()
				switch {
				case err == nil:
					if err := s.Complete(nil); err != nil {
						t.Errorf("Complete: %v", err)
					}
					mu.Lock()
					posts++
					mu.Unlock()
				case !errors.Is(err, ErrBusy) && !errors.Is(err, ErrClosed):
					t.Errorf("CopyIn: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, s.Close())
	require.Zero(t, regs.live.Load())
	t.Logf("%d posts, %d successful closes (the first released, the rest were no-ops)", posts, closes)
	require.NotZero(t, posts)
}

// faultsOf reads a fault of ibcoll-perf's --fault syntax ("" for none) into a Set for
// rank 0.
func faultsOf(t *testing.T, s string) *fault.Set {
	if s == "" {
		return nil
	}
	f, err := fault.Parse(s)
	require.NoError(t, err)
	return fault.NewSet([]fault.Fault{f}, 0)
}

// TestStageInitInPlace: Init remakes a closed Stage where it lies; an unstaged one
// costs no allocation, a Stage still holding scratch is refused, and a failed Init
// leaves the Stage closed with nothing made.
func TestStageInitInPlace(t *testing.T) {
	plan, src, dst := bothStaged(t)
	regs := &fakeRegistrar{}
	live := mem.Live()
	var s Stage
	require.NoError(t, s.Init(plan, src, dst, regs))
	require.True(t, s.Staged())
	require.Equal(t, live+2, mem.Live(), "the two scratch buffers")
	err := s.Init(plan, src, dst, regs)
	require.ErrorIs(t, err, ErrInvalid, "a Stage holding scratch")
	require.Contains(t, err.Error(), "Close it first")
	require.NoError(t, s.CopyIn())
	require.NoError(t, s.Complete(nil))
	require.NoError(t, s.Close())
	require.Equal(t, live, mem.Live())
	require.Zero(t, regs.live.Load())

	// Remade after Close, with a fault at its second allocation: closed, nothing left.
	f := faultsOf(t, "alloc@0:2")
	err = s.Init(plan, src, dst, regs, WithFaults(f))
	require.ErrorIs(t, err, ErrInjected)
	require.Equal(t, live, mem.Live(), "scratch left by a failed Init")
	require.Zero(t, regs.live.Load())
	require.NoError(t, s.Close())
	require.NoError(t, s.Init(plan, src, dst, regs), "a failed Init leaves the Stage reusable")
	require.NoError(t, s.Close())

	// A Close that could not deregister keeps the scratch for a retry: Init refuses
	// to overwrite it until a Close succeeds.
	require.NoError(t, s.Init(plan, src, dst, regs))
	regs.failClose.Store(1)
	require.Error(t, s.Close())
	require.ErrorIs(t, s.Init(plan, src, dst, regs), ErrInvalid, "a Stage whose Close failed")
	require.NoError(t, s.Close(), "the retry")
	require.Equal(t, live, mem.Live())
	require.Zero(t, regs.live.Load())

	none := Staging{}
	allocs := testing.AllocsPerRun(100, func() {
		if err := s.Init(none, src, dst, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "an unstaged Stage remade in place")
	require.ErrorIs(t, (*Stage)(nil).Init(none, src, dst, nil), ErrInvalid)
}
