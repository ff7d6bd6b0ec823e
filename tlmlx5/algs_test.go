package tlmlx5

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/reduce"
)

// collCase is one collective of a whole team: what every rank passes, as a caller of
// coll would, before collective.Layout.
type collCase struct {
	c       collective.Type
	alg     string
	n, root int
	dt      collective.DType
	op      collective.Op
	inPlace bool
	count   int
	// counts[r]: rank r's block of a gatherv, scatterv or allgatherv; m[p][r]: what p
	// sends to r in an alltoallv.
	counts []int
	m      [][]int
	// Each rank's displacements of its v-layout buffers.
	srcDispls, dstDispls [][]int
}

func (cs *collCase) String() string {
	s := fmt.Sprintf("%v/%s/n%d/%v/count%d", cs.c, cs.alg, cs.n, cs.dt, cs.count)
	if cs.c.IsRooted() {
		s += fmt.Sprintf("/root%d", cs.root)
	}
	if cs.c.IsReduction() {
		s += "/" + cs.op.String()
	}
	if cs.inPlace {
		s += "/inplace"
	}
	return s
}

// randDispls places blocks of counts in a random order with random gaps (0 to 3
// elements) between them, so that bytes no rank owns lie inside the buffer.
func randDispls(rnd *rand.Rand, counts []int) []int {
	d := make([]int, len(counts))
	at := rnd.IntN(3)
	for _, r := range rnd.Perm(len(counts)) {
		d[r] = at
		at += counts[r] + rnd.IntN(4)
	}
	return d
}

// vCounts is a rank's v-layout counts around scale: zeros included.
func vCount(rnd *rand.Rand, scale int) int {
	if scale == 0 || rnd.IntN(5) == 0 {
		return 0
	}
	return rnd.IntN(2*scale + 1)
}

var intDTypes = []collective.DType{collective.Int8, collective.Int16, collective.Int32, collective.Int64,
	collective.Uint8, collective.Uint16, collective.Uint32, collective.Uint64}

// newCase fills the random parts of a case: the dtype (an integer one for reductions,
// so that any order of combining is exact), the op and the v-layouts.
func newCase(rnd *rand.Rand, c collective.Type, alg string, n, root, count int, inPlace bool) *collCase {
	cs := &collCase{c: c, alg: alg, n: n, root: root, count: count, inPlace: inPlace}
	if c.IsReduction() {
		cs.dt = intDTypes[rnd.IntN(len(intDTypes))]
		ops := collective.Ops()
		cs.op = ops[rnd.IntN(len(ops))]
	} else {
		dts := collective.DTypes()
		cs.dt = dts[rnd.IntN(len(dts))]
	}
	cs.srcDispls, cs.dstDispls = make([][]int, n), make([][]int, n)
	switch c {
	case collective.Gatherv, collective.Scatterv, collective.Allgatherv:
		cs.counts = make([]int, n)
		for r := range cs.counts {
			cs.counts[r] = vCount(rnd, count)
		}
		for r := 0; r < n; r++ {
			cs.srcDispls[r], cs.dstDispls[r] = randDispls(rnd, cs.counts), randDispls(rnd, cs.counts)
		}
	case collective.Alltoallv:
		cs.m = make([][]int, n)
		for p := range cs.m {
			cs.m[p] = make([]int, n)
		}
		for p := 0; p < n; p++ {
			for r := 0; r < n; r++ {
				if inPlace && r < p {
					cs.m[p][r] = cs.m[r][p] // in place, what goes to r comes from r
				} else {
					cs.m[p][r] = vCount(rnd, count)
				}
			}
		}
		for r := 0; r < n; r++ {
			cs.srcDispls[r], cs.dstDispls[r] = randDispls(rnd, cs.m[r]), randDispls(rnd, cs.column(r))
		}
	}
	return cs
}

// column is what every rank sends to r.
func (cs *collCase) column(r int) []int {
	out := make([]int, cs.n)
	for p := range out {
		out[p] = cs.m[p][r]
	}
	return out
}

// args is rank r's arguments, as coll's caller gives them.
func (cs *collCase) args(r int) collective.Args {
	n, cnt := cs.n, cs.count
	a := collective.Args{Rank: r, Size: n, Root: cs.root, InPlace: cs.inPlace, DTypeSize: cs.dt.Size()}
	switch cs.c {
	case collective.Bcast:
		a.Src.Count = cnt
	case collective.Gather, collective.Allgather:
		a.Src.Count, a.Dst.Count = cnt, n*cnt
	case collective.Scatter:
		a.Src.Count, a.Dst.Count = n*cnt, cnt
	case collective.Reduce, collective.Allreduce:
		a.Src.Count, a.Dst.Count = cnt, cnt
	case collective.Alltoall:
		a.Src.Count, a.Dst.Count = n*cnt, n*cnt
	case collective.ReduceScatter:
		a.Src.Count, a.Dst.Count = n*cnt, cnt
		if cs.inPlace {
			a.Dst.Count = n * cnt
		}
	case collective.Gatherv, collective.Allgatherv:
		a.Src.Count = cs.counts[r]
		a.Dst = collective.Buf{Counts: cs.counts, Displs: cs.dstDispls[r]}
	case collective.Scatterv:
		a.Src = collective.Buf{Counts: cs.counts, Displs: cs.srcDispls[r]}
		a.Dst.Count = cs.counts[r]
	case collective.Alltoallv:
		a.Src = collective.Buf{Counts: cs.m[r], Displs: cs.srcDispls[r]}
		a.Dst = collective.Buf{Counts: cs.column(r), Displs: cs.dstDispls[r]}
	}
	return a
}

// rankRun is one rank's part of a case: its layout, buffers and task.
type rankRun struct {
	l        collective.Layout
	src, dst hostBuf
	spec     driver.TaskSpec
}

// build computes every rank's layout with collective's Layout and makes the specs.
func (cs *collCase) build(t testing.TB, seq uint64) []*rankRun {
	t.Helper()
	out := make([]*rankRun, cs.n)
	for r := 0; r < cs.n; r++ {
		out[r] = newRankRun(t, seq, cs.c, cs.dt, cs.op, cs.alg, cs.args(r))
	}
	return out
}

// newRankRun is one rank's buffers and TaskSpec for its arguments a: the extents come
// from collective's Layout, as coll's Init computes them.
func newRankRun(t testing.TB, seq uint64, c collective.Type, dtype collective.DType, op collective.Op, alg string,
	a collective.Args) *rankRun {
	t.Helper()
	dt := dtype.Size()
	a.DTypeSize = dt
	l, err := c.Layout(a)
	require.NoError(t, err, "%v rank %d", c, a.Rank)
	rr := &rankRun{l: l, src: newHostBuf(l.Src.Bytes(dt)), dst: newHostBuf(l.Dst.Bytes(dt))}
	rr.spec = driver.TaskSpec{Seq: seq, Type: c, Root: a.Root, DType: dtype, Op: op, InPlace: l.InPlace,
		Persistent: true, Block: l.Block, Alg: alg,
		Src: rr.src.driverBuf(l.Src), Dst: rr.dst.driverBuf(l.Dst)}
	if !c.IsRooted() {
		rr.spec.Root = 0
	}
	return rr
}

// fill puts fresh random bytes everywhere, guards and outputs included, and returns a
// snapshot of every rank's two buffers.
func fill(rnd *rand.Rand, runs []*rankRun) [][2][]byte {
	snap := make([][2][]byte, len(runs))
	// A stream seeded from the test's seeded generator fills in bulk (a byte
	// loop is slow under the race detector), and replays with the seed.
	var seed [32]byte
	testutil.Fill(rnd, seed[:])
	fast := rand.NewChaCha8(seed)
	for r, rr := range runs {
		_, _ = fast.Read(rr.src.b)
		_, _ = fast.Read(rr.dst.b)
		snap[r] = [2][]byte{bytes.Clone(rr.src.b), bytes.Clone(rr.dst.b)}
	}
	return snap
}

// expect is the reference: every rank's two buffers (guards included) after the
// collective, computed in plain Go from the snapshot taken before it.
func (cs *collCase) expect(t testing.TB, runs []*rankRun, in [][2][]byte) [][2][]byte {
	t.Helper()
	n, dt := cs.n, cs.dt.Size()
	out := make([][2][]byte, n)
	for r := range in {
		out[r] = [2][]byte{bytes.Clone(in[r][0]), bytes.Clone(in[r][1])}
	}
	el := func(b []byte, off, cnt int) []byte {
		if cnt == 0 { // a zero count's displacement may lie past the extent
			return nil
		}
		return b[off*dt : (off+cnt)*dt]
	}
	blk := 0
	if runs[0].l.Block > 0 {
		blk = runs[0].l.Block
	}
	red := func(inputs [][]byte) []byte {
		acc := bytes.Clone(inputs[0])
		for _, x := range inputs[1:] {
			require.NoError(t, reduce.Into(acc, x, cs.dt, cs.op))
		}
		require.NoError(t, reduce.Finalize(acc, cs.dt, cs.op, n))
		return acc
	}
	ip := func(r int) bool { return runs[r].l.InPlace }
	src, dst := func(r int) []byte { return in[r][0] }, func(r int) []byte { return in[r][1] }
	root := cs.root
	switch cs.c {
	case collective.Bcast:
		for r := 0; r < n; r++ {
			if r != root {
				copy(out[r][0], el(src(root), 0, blk))
			}
		}
	case collective.Gather:
		for p := 0; p < n; p++ {
			if !(p == root && ip(root)) {
				copy(el(out[root][1], p*blk, blk), el(src(p), 0, blk))
			}
		}
	case collective.Gatherv:
		d := cs.dstDispls[root]
		for p := 0; p < n; p++ {
			if !(p == root && ip(root)) {
				copy(el(out[root][1], d[p], cs.counts[p]), el(src(p), 0, cs.counts[p]))
			}
		}
	case collective.Scatter:
		for r := 0; r < n; r++ {
			if !(r == root && ip(root)) {
				copy(el(out[r][1], 0, blk), el(src(root), r*blk, blk))
			}
		}
	case collective.Scatterv:
		d := cs.srcDispls[root]
		for r := 0; r < n; r++ {
			if !(r == root && ip(root)) {
				copy(el(out[r][1], 0, cs.counts[r]), el(src(root), d[r], cs.counts[r]))
			}
		}
	case collective.Reduce, collective.Allreduce:
		inputs := make([][]byte, n)
		for p := range inputs {
			if ip(p) {
				inputs[p] = el(dst(p), 0, blk)
			} else {
				inputs[p] = el(src(p), 0, blk)
			}
		}
		res := red(inputs)
		for r := 0; r < n; r++ {
			if cs.c == collective.Allreduce || r == root {
				copy(out[r][1], res)
			}
		}
	case collective.Allgather:
		for p := 0; p < n; p++ {
			var own []byte
			if ip(p) {
				own = el(dst(p), p*blk, blk)
			} else {
				own = el(src(p), 0, blk)
			}
			for r := 0; r < n; r++ {
				copy(el(out[r][1], p*blk, blk), own)
			}
		}
	case collective.Alltoall:
		for p := 0; p < n; p++ {
			from := src(p)
			if ip(p) {
				from = dst(p)
			}
			for r := 0; r < n; r++ {
				copy(el(out[r][1], p*blk, blk), el(from, r*blk, blk))
			}
		}
	case collective.ReduceScatter:
		for r := 0; r < n; r++ {
			inputs := make([][]byte, n)
			for p := range inputs {
				if ip(p) {
					inputs[p] = el(dst(p), r*blk, blk)
				} else {
					inputs[p] = el(src(p), r*blk, blk)
				}
			}
			at := 0
			if ip(r) {
				at = r * blk
			}
			copy(el(out[r][1], at, blk), red(inputs))
		}
	case collective.Allgatherv:
		for p := 0; p < n; p++ {
			var own []byte
			if ip(p) {
				own = el(dst(p), cs.dstDispls[p][p], cs.counts[p])
			} else {
				own = el(src(p), 0, cs.counts[p])
			}
			for r := 0; r < n; r++ {
				copy(el(out[r][1], cs.dstDispls[r][p], cs.counts[p]), own)
			}
		}
	case collective.Alltoallv:
		for p := 0; p < n; p++ {
			from, sd := src(p), cs.srcDispls[p]
			if ip(p) {
				from, sd = dst(p), cs.dstDispls[p]
			}
			for r := 0; r < n; r++ {
				copy(el(out[r][1], cs.dstDispls[r][p], cs.m[p][r]), el(from, sd[r], cs.m[p][r]))
			}
		}
	}
	return out
}

// check compares every rank's buffers, guards included, with the reference.
func check(t testing.TB, what string, runs []*rankRun, want [][2][]byte) {
	t.Helper()
	for r, rr := range runs {
		if !bytes.Equal(want[r][0], rr.src.b) {
			testutil.Equal(t, want[r][0], rr.src.b, fmt.Sprintf("%s: rank %d Src", what, r))
		}
		if !bytes.Equal(want[r][1], rr.dst.b) {
			testutil.Equal(t, want[r][1], rr.dst.b, fmt.Sprintf("%s: rank %d Dst", what, r))
		}
	}
}

// runCase runs a case on ft: NewTask on every rank, then three posts of fresh data,
// each checked against the reference.
func runCase(t *testing.T, ft *fakeTeam, rnd *rand.Rand, cs *collCase) {
	t.Helper()
	runCaseThen(t, ft, rnd, cs, nil)
}

// runCaseThen is runCase, then calls then (if not nil) with the tasks, before they
// are quiesced and closed.
func runCaseThen(t *testing.T, ft *fakeTeam, rnd *rand.Rand, cs *collCase, then func(tasks []driver.Task)) {
	t.Helper()
	runs := cs.build(t, ft.newSeq())
	tasks := make([]driver.Task, cs.n)
	defer func() { ft.quiesce(t, tasks) }()
	for r, rr := range runs {
		k, err := ft.newTask(r, &rr.spec)
		require.NoError(t, err, "%v: NewTask rank %d", cs, r)
		tasks[r] = k
	}
	for r := range tasks {
		require.Equal(t, tasks[0].Alg(), tasks[r].Alg(), "%v: every rank picks the same algorithm", cs)
	}
	if cs.alg != "" {
		require.Equal(t, cs.alg, tasks[0].Alg()[:len(cs.alg)], "%v", cs)
	}
	for post := uint32(1); post <= 3; post++ {
		in := fill(rnd, runs)
		want := cs.expect(t, runs, in)
		ft.run(t, tasks, post)
		check(t, fmt.Sprintf("%v post %d (alg %s)", cs, post, tasks[0].Alg()), runs, want)
	}
	if then != nil {
		then(tasks)
	}
}

// algNames is every algorithm of c to test: the table's names, a few radixes of the
// ones that take one, and the size-based default ("").
func algNames(c collective.Type) []string {
	out := []string{""}
	for _, name := range Algorithms(c) {
		out = append(out, name)
		for i := range algorithms {
			if a := &algorithms[i]; a.coll == c && a.name == name && a.radix {
				out = append(out, name+":2", name+":3")
			}
		}
	}
	return out
}

func rootsOf(c collective.Type, n int) []int {
	if !c.IsRooted() {
		return []int{0}
	}
	roots := []int{0}
	if n > 2 {
		roots = append(roots, n/2)
	}
	if n > 1 {
		roots = append(roots, n-1)
	}
	return roots
}

var (
	teamSizes  = []int{1, 2, 3, 4, 5, 8}
	caseCounts = []int{0, 1, 7, 2001}
)

// TestAlgorithms runs every algorithm of every collective on teams of 1 to 8 ranks,
// with empty, one-element, odd and larger counts, roots first, middle and last, in
// place where the table allows it and v-layouts with gaps, each task posted three
// times with fresh data; every byte of every rank's buffers (inputs, gaps and a guard
// after each buffer included) is checked against a plain-Go reference.
func TestAlgorithms(t *testing.T) {
	rnd := testutil.Rand(t)
	teams := map[int]*fakeTeam{}
	for _, n := range teamSizes {
		teams[n] = newFakeTeam(t, n, nil)
	}
	for _, c := range collective.Types() {
		t.Run(c.String(), func(t *testing.T) {
			cases := 0
			defer func() { t.Logf("%d cases", cases) }()
			for _, alg := range algNames(c) {
				for _, n := range teamSizes {
					if alg != "" && Fits(c, alg, n) != nil {
						continue
					}
					// The default choice and the extra radixes run a
					// reduced matrix: the named algorithms run it all.
					extra := alg == "" || strings.Contains(alg, ":")
					for i, root := range rootsOf(c, n) {
						if extra && i != len(rootsOf(c, n))/2 {
							continue
						}
						for _, count := range caseCounts {
							if extra && count < 2 {
								continue
							}
							inPlaces := []bool{false}
							if collective.Describe(c).InPlace {
								inPlaces = append(inPlaces, true)
							}
							for _, ip := range inPlaces {
								if c == collective.Barrier && count > 0 {
									continue
								}
								runCase(t, teams[n], rnd, newCase(rnd, c, alg, n, root, count, ip))
								cases++
							}
						}
					}
				}
			}
		})
	}
}

// TestLargeTeam: a team of 17 ranks, past the send windows of the linear and pairwise
// algorithms (sendWindow writes in flight), the smaller control rings of teams over
// 16 ranks, and the size-based default's switch to k-nomial gather and scatter: every
// algorithm of every collective once, in place where allowed.
func TestLargeTeam(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 17
	ft := newFakeTeam(t, n, nil)
	for _, c := range collective.Types() {
		for _, alg := range append([]string{""}, Algorithms(c)...) {
			if alg != "" && Fits(c, alg, n) != nil {
				continue
			}
			ip := collective.Describe(c).InPlace && rnd.IntN(2) == 0
			runCase(t, ft, rnd, newCase(rnd, c, alg, n, rnd.IntN(n), 1+rnd.IntN(200), ip))
		}
	}
}
