package coll_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// Mismatches between ranks' arguments must end as a mismatch on every rank, never at
// the deadline. The teams here have a deadline far beyond what detection takes, and a
// timeout is a failure: the tests assert the kind of error, not how long it took.

// mismatchTimeout is the teams' Config.Timeout: a mismatch caught only by it shows as
// ErrTimeout, which the tests refuse.
const mismatchTimeout = 2 * time.Minute

// rootedArgs is the arguments of a rooted collective on rank of n as a rank that
// believes root is the root passes them, count elements per block.
func rootedArgs(typ coll.CollType, root, rank, n, count int) coll.Args {
	a := coll.Args{Type: typ, Root: root, DType: coll.Int32}
	buf := func(elems int) coll.BufferDesc {
		return coll.BufferDesc{Slice: make([]byte, 4*elems), Count: elems}
	}
	v := func() coll.BufferDesc {
		b := coll.BufferDesc{Slice: make([]byte, 4*n*count)}
		for i := 0; i < n; i++ {
			b.Counts = append(b.Counts, count)
			b.Displs = append(b.Displs, i*count)
		}
		return b
	}
	me := rank == root
	switch typ {
	case coll.Bcast:
		a.Src = buf(count)
	case coll.Gather:
		a.Src = buf(count)
		if me {
			a.Dst = buf(n * count)
		}
	case coll.Gatherv:
		a.Src = buf(count)
		if me {
			a.Dst = v()
		}
	case coll.Scatter:
		a.Dst = buf(count)
		if me {
			a.Src = buf(n * count)
		}
	case coll.Scatterv:
		a.Dst = buf(count)
		if me {
			a.Src = v()
		}
	case coll.Reduce:
		a.Op = coll.OpSum
		a.Src = buf(count)
		if me {
			a.Dst = buf(count)
		}
	default:
		panic(fmt.Sprintf("rootedArgs: %v is not rooted", typ))
	}
	return a
}

// requireMismatch requires every rank's error to be a mismatch, not a timeout.
func requireMismatch(t *testing.T, errs []error, contains ...string) {
	t.Helper()
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.NotErrorIs(t, err, coll.ErrTimeout, "rank %d: a mismatch caught only by the deadline", r)
		require.ErrorIs(t, err, coll.ErrMismatch, "rank %d", r)
		for _, s := range contains {
			require.ErrorContains(t, err, s, "rank %d", r)
		}
	}
}

// TestRootMismatch: for every rooted collective and several splits of the ranks
// between two roots (the roots themselves believing they are the root, so that no
// data may ever flow between the two sides), no rank waits for its deadline, and the
// team works afterwards. With all-or-nothing outcomes every rank fails with
// ErrMismatch, its message naming both roots. In the default mode a rank may succeed
// where its part was done before the news came (a leaf of the majority's root, say),
// and then its output is right (checked, with fresh random data); every other rank
// fails with ErrMismatch, and at least one message names both roots.
func TestRootMismatch(t *testing.T) { bothModes(t, testRootMismatch) }

func testRootMismatch(t *testing.T, aon bool) {
	const n, count = 4, 16
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: mismatchTimeout, AllOrNothing: aon})
	splits := []struct {
		name  string
		rootA int
		rootB int
		onB   func(r int) bool // ranks that pass rootB
	}{
		{"each root its own", 0, 1, func(r int) bool { return r == 1 }},
		{"halves", 0, 3, func(r int) bool { return r >= 2 }},
		{"one rank off", 2, 1, func(r int) bool { return r == 3 }},
	}
	for _, typ := range []coll.CollType{coll.Bcast, coll.Gather, coll.Gatherv, coll.Scatter, coll.Scatterv, coll.Reduce} {
		for _, sp := range splits {
			t.Run(fmt.Sprintf("%v/%s", typ, sp.name), func(t *testing.T) {
				args := make([]coll.Args, n)
				roots := make([]int, n)
				for r := range n {
					roots[r] = sp.rootA
					if sp.onB(r) {
						roots[r] = sp.rootB
					}
					args[r] = rootedArgs(typ, roots[r], r, n, count)
					testutil.Fill(rnd, args[r].Src.Slice)
				}
				srcs := make([][]byte, n) // what each rank sent, before any rank ran
				for r := range n {
					srcs[r] = append([]byte(nil), args[r].Src.Slice...)
				}
				errs := w.run(func(r *rank) error {
					return r.team.Run(context.Background(), args[r.r])
				})
				if aon {
					requireMismatch(t, errs, fmt.Sprintf("root %d", sp.rootA), fmt.Sprintf("root %d", sp.rootB), "root mismatch")
				} else {
					requireMismatchOrRight(t, errs, func(r int) { requireRootedOutput(t, typ, args[r], srcs, roots, r, count) },
						fmt.Sprintf("root %d", sp.rootA), fmt.Sprintf("root %d", sp.rootB), "root mismatch")
				}
				w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
			})
		}
	}
}

// requireMismatchOrRight is requireMismatch for the default outcomes: a rank may
// succeed, and then check(rank) checks its output; every other rank fails with a
// mismatch, not a timeout, and at least one error contains every string given.
func requireMismatchOrRight(t *testing.T, errs []error, check func(rank int), contains ...string) {
	t.Helper()
	says, failed := false, 0
	for r, err := range errs {
		if err == nil {
			check(r)
			continue
		}
		failed++
		require.NotErrorIs(t, err, coll.ErrTimeout, "rank %d: a mismatch caught only by the deadline", r)
		require.ErrorIs(t, err, coll.ErrMismatch, "rank %d", r)
		all := true
		for _, s := range contains {
			all = all && strings.Contains(err.Error(), s)
		}
		says = says || all
	}
	require.NotZero(t, failed, "every rank succeeded a mismatched collective")
	require.True(t, says, "no error contains %q: %v", contains, errs)
}

// requireRootedOutput checks the output of rank r, which succeeded a rooted collective
// of type typ as root roots[r] (the others' views in roots, what each sent in srcs).
func requireRootedOutput(t *testing.T, typ coll.CollType, a coll.Args, srcs [][]byte, roots []int, r, count int) {
	t.Helper()
	root, blk := roots[r], 4*count
	switch {
	case typ == coll.Bcast:
		require.Equal(t, srcs[root], a.Src.Slice, "rank %d succeeded a bcast from root %d with other data", r, root)
	case (typ == coll.Scatter || typ == coll.Scatterv) && r != root:
		require.Equal(t, srcs[root][r*blk:(r+1)*blk], a.Dst.Slice, "rank %d succeeded a scatter from root %d with other data", r, root)
	case (typ == coll.Gather || typ == coll.Gatherv) && r == root:
		for p := range srcs {
			require.Equal(t, srcs[p][:blk], a.Dst.Slice[p*blk:(p+1)*blk], "root %d succeeded a gather with rank %d's block wrong", r, p)
		}
	case typ == coll.Reduce && r == root:
		for i := 0; i < count; i++ {
			var sum int32
			for p := range srcs {
				sum += int32(binary.LittleEndian.Uint32(srcs[p][4*i:]))
			}
			require.Equal(t, sum, int32(binary.LittleEndian.Uint32(a.Dst.Slice[4*i:])), "root %d succeeded a reduce with element %d wrong", r, i)
		}
	}
}

// TestRootMismatchBeforePost: the ranks that disagree find out at Init, from the
// signatures, before any data could show it: the first ranks post and poll while the
// last one has not posted yet, then it posts, and every rank fails with the
// mismatch, naming both roots (by default, root 0's leaf may succeed first, with
// root 0's data).
func TestRootMismatchBeforePost(t *testing.T) { bothModes(t, testRootMismatchBeforePost) }

func testRootMismatchBeforePost(t *testing.T, aon bool) {
	const n, count = 3, 8
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: mismatchTimeout, AllOrNothing: aon})
	reqs := make([]*coll.Request, n)
	roots := []int{0, 0, 2}
	reqArgs := make([]coll.Args, n)
	for r := range n {
		reqArgs[r] = rootedArgs(coll.Bcast, roots[r], r, n, count)
		testutil.Fill(rnd, reqArgs[r].Src.Slice)
	}
	w.mustRun(func(r *rank) error {
		var err error
		reqs[r.r], err = r.team.Init(reqArgs[r.r])
		return err
	})
	srcs := make([][]byte, n)
	for r := range n {
		srcs[r] = append([]byte(nil), reqArgs[r].Src.Slice...)
	}
	perrs := make([]error, n)
	for r := 0; r < n-1; r++ {
		perrs[r] = reqs[r].Post()
		for i := 0; i < 20; i++ {
			_, _ = reqs[r].Test()
		}
	}
	perrs[n-1] = reqs[n-1].Post()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = errors.Join(perrs[r], reqs[r].Wait(context.Background()))
		}(r)
	}
	wg.Wait()
	if aon {
		requireMismatch(t, errs, "root 0", "root 2")
	} else {
		// Rank 1, root 0's leaf, may have its data before the news.
		requireMismatchOrRight(t, errs, func(r int) { requireRootedOutput(t, coll.Bcast, reqArgs[r], srcs, roots, r, count) }, "root 0", "root 2")
	}
	for _, q := range reqs {
		require.NoError(t, q.Close())
	}
	w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
}

// TestAlgorithmMismatch: ranks that name different algorithms or radices for the
// same collective (the evidence on the wire may come before a rank posted, or after
// its own part ended) all fail with ErrMismatch. The ranks post at different times:
// rank order, reverse order, and all at once.
func TestAlgorithmMismatch(t *testing.T) { bothModes(t, testAlgorithmMismatch) }

func testAlgorithmMismatch(t *testing.T, aon bool) {
	const n, count = 4, 64 // a power of two: rd fits
	w := newWorld(t, n, coll.Config{Timeout: mismatchTimeout, AllOrNothing: aon})
	cases := []struct {
		typ  coll.CollType
		a, b string
	}{
		{coll.Bcast, "knomial:2", "knomial:3"},
		{coll.Bcast, "knomial", "chain"},
		{coll.Reduce, "knomial:2", "knomial:3"},
		{coll.ReduceScatter, "ring", "rh"},
		{coll.Gather, "knomial:2", "linear"},
		{coll.Allreduce, "rd", "ring"},
		{coll.Allgather, "ring", "rd"},
	}
	for _, c := range cases {
		for _, order := range []string{"together", "ascending", "descending"} {
			t.Run(fmt.Sprintf("%v/%s-%s/%s", c.typ, c.a, c.b, order), func(t *testing.T) {
				gate := make([]chan struct{}, n+1)
				for i := range gate {
					gate[i] = make(chan struct{})
				}
				close(gate[0])
				errs := w.run(func(r *rank) error {
					a := argsFor(c.typ, r.r, n, count)
					a.Alg = c.a
					if r.r%2 == 1 {
						a.Alg = c.b
					}
					req, err := r.team.Init(a)
					if err != nil {
						return err
					}
					defer req.Close()
					slot := r.r
					if order == "descending" {
						slot = n - 1 - r.r
					}
					if order != "together" {
						<-gate[slot]
					}
					perr := req.Post()
					if order != "together" {
						// Let the next rank post only once this one's part had a chance
						// to run: a few progress calls, never a timed wait.
						for i := 0; i < 50; i++ {
							if done, _ := req.Test(); done {
								break
							}
						}
						close(gate[slot+1])
					}
					return errors.Join(perr, req.Wait(context.Background()))
				})
				if aon {
					requireMismatch(t, errs, "mismatch")
				} else {
					// A rank that agrees with its tree neighbours may finish first (an
					// even rank's gather block, say); TestRootMismatch and
					// TestMismatchAfterRepeats check such ranks' outputs.
					requireMismatchOrRight(t, errs, func(int) {}, "mismatch")
				}
				w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
			})
		}
	}
}

// bothModes runs f with Config.AllOrNothing on and off: mismatches end alike in both.
func bothModes(t *testing.T, f func(t *testing.T, aon bool)) {
	for _, aon := range []bool{true, false} {
		t.Run(map[bool]string{true: "all-or-nothing", false: "default"}[aon], func(t *testing.T) { f(t, aon) })
	}
}

// argsFor is an unrooted or root-0 collective of count elements on rank of n.
func argsFor(typ coll.CollType, rank, n, count int) coll.Args {
	buf := func(elems int) coll.BufferDesc {
		return coll.BufferDesc{Slice: make([]byte, 4*elems), Count: elems}
	}
	switch typ {
	case coll.Allreduce:
		return coll.Args{Type: typ, DType: coll.Int32, Op: coll.OpSum, Src: buf(count), Dst: buf(count)}
	case coll.Allgather:
		return coll.Args{Type: typ, DType: coll.Int32, Src: buf(count), Dst: buf(n * count)}
	case coll.ReduceScatter:
		return coll.Args{Type: typ, DType: coll.Int32, Op: coll.OpSum, Src: buf(n * count), Dst: buf(count)}
	}
	return rootedArgs(typ, 0, rank, n, count)
}
