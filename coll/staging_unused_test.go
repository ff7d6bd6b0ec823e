package coll_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestStagingSaysUnused: Request.Staging calls a buffer that the collective does not
// use on this rank "unused" (a gather's Dst off the root, a scatter's Src off the
// root, a bcast's Dst), not "host direct", before and after Close; the sides it uses
// say how they go.
func TestStagingSaysUnused(t *testing.T) {
	const n, count = 3, 4
	w := newWorld(t, n, coll.Config{Timeout: mismatchTimeout})
	for _, typ := range []coll.CollType{coll.Gather, coll.Scatter, coll.Bcast} {
		t.Run(typ.String(), func(t *testing.T) {
			reports := make([][2]coll.StagingReport, n)
			w.mustRun(func(r *rank) error {
				req, err := r.team.Init(rootedArgs(typ, 0, r.r, n, count))
				if err != nil {
					return err
				}
				if err := postWaitClose(context.Background(), req); err != nil {
					return err
				}
				reports[r.r][1] = req.Staging()
				return nil
			})
			// Before Close too: one more, left open while it is read.
			w.mustRun(func(r *rank) error {
				req, err := r.team.Init(rootedArgs(typ, 0, r.r, n, count))
				if err != nil {
					return err
				}
				reports[r.r][0] = req.Staging()
				return req.Close()
			})
			for r := range n {
				for i, rep := range reports[r] {
					srcUsed := typ != coll.Scatter || r == 0
					dstUsed := typ == coll.Scatter || (typ == coll.Gather && r == 0)
					require.Equal(t, !srcUsed, rep.Src.Unused, "rank %d report %d: Src %s", r, i, rep.Src)
					require.Equal(t, !dstUsed, rep.Dst.Unused, "rank %d report %d: Dst %s", r, i, rep.Dst)
					for _, side := range []struct {
						used bool
						s    string
					}{{srcUsed, rep.Src.String()}, {dstUsed, rep.Dst.String()}} {
						if side.used {
							require.Equal(t, "host direct", side.s, "rank %d report %d", r, i)
						} else {
							require.Equal(t, "unused", side.s, "rank %d report %d", r, i)
						}
					}
				}
			}
		})
	}
}

// TestStagingSaysUnusedInPlaceAndBarrier: an in-place allreduce uses only Dst (Src is
// unused), an in-place scatter's root only Src, and a barrier neither.
func TestStagingSaysUnusedInPlaceAndBarrier(t *testing.T) {
	const n, count = 2, 4
	w := newWorld(t, n, coll.Config{Timeout: mismatchTimeout})
	buf := func(elems int) coll.BufferDesc {
		return coll.BufferDesc{Slice: make([]byte, 4*elems), Count: elems}
	}
	for _, c := range []struct {
		name     string
		args     func(rank int) coll.Args
		src, dst func(rank int) bool // used
	}{
		{"allreduce in place", func(int) coll.Args {
			return coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum, Dst: buf(count), Flags: coll.InPlace}
		}, func(int) bool { return false }, func(int) bool { return true }},
		{"scatter in place", func(r int) coll.Args {
			a := rootedArgs(coll.Scatter, 0, r, n, count)
			if r == 0 {
				a.Flags |= coll.InPlace
				a.Dst = coll.BufferDesc{}
			}
			return a
		}, func(r int) bool { return r == 0 }, func(r int) bool { return r != 0 }},
		{"barrier", func(int) coll.Args { return coll.Args{Type: coll.Barrier} },
			func(int) bool { return false }, func(int) bool { return false }},
	} {
		t.Run(c.name, func(t *testing.T) {
			reports := make([]coll.StagingReport, n)
			w.mustRun(func(r *rank) error {
				req, err := r.team.Init(c.args(r.r))
				if err != nil {
					return err
				}
				reports[r.r] = req.Staging()
				return postWaitClose(context.Background(), req)
			})
			for r, rep := range reports {
				require.Equal(t, !c.src(r), rep.Src.Unused, "rank %d: Src %s", r, rep.Src)
				require.Equal(t, !c.dst(r), rep.Dst.Unused, "rank %d: Dst %s", r, rep.Dst)
			}
		})
	}
}
