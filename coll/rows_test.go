package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestStagedRows: a destination that holds one block per rank and that the NIC cannot
// reach (sim memory: staged, copied out) goes out as the blocks land, by copies of the
// same range of several blocks at once (asym's rows): gather, allgather and alltoall,
// persistent and not, 3 posts of fresh data each, every byte checked, and the report
// of every staged rank counts copies of rows. Blocks of 512 KiB land in two pieces
// each; no single block reaches a copy's worth (1 MiB), so what goes out early goes
// as rows.
func TestStagedRows(t *testing.T) {
	const n, block = 6, 512 << 10
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second})
	defer w.close()
	for _, typ := range []coll.CollType{coll.Gather, coll.Allgather, coll.Alltoall} {
		for _, persistent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/persistent=%v", typ, persistent), func(t *testing.T) {
				srcLen := block
				if typ == coll.Alltoall {
					srcLen = n * block
				}
				srcs := make([][]byte, n)
				dsts := make([]*mem.Buffer, n)
				for i := range n {
					srcs[i] = make([]byte, srcLen)
					if typ != coll.Gather || i == 0 {
						d, err := mem.Alloc(mem.Sim, n*block)
						require.NoError(t, err)
						defer d.Close()
						dsts[i] = d
					}
				}
				args := func(r int) coll.Args {
					a := coll.Args{Type: typ, DType: coll.Uint8, Src: coll.BufferDesc{Slice: srcs[r], Count: srcLen}}
					if dsts[r] != nil {
						a.Dst = coll.BufferDesc{Buf: dsts[r], Type: mem.Sim, Count: n * block}
					}
					if persistent {
						a.Flags = coll.Persistent
					}
					return a
				}
				reqs := make([]*coll.Request, n)
				if persistent {
					w.mustRun(func(r *rank) (err error) { reqs[r.r], err = r.team.Init(args(r.r)); return err })
					defer closeReqs(reqs)
				}
				rows := make([]int64, n)
				for post := 1; post <= 3; post++ {
					for _, s := range srcs {
						testutil.Fill(rnd, s)
					}
					w.mustRun(func(r *rank) error {
						q := reqs[r.r]
						if !persistent {
							var err error
							if q, err = r.team.Init(args(r.r)); err != nil {
								return err
							}
							defer q.Close()
						}
						if err := q.Post(); err != nil {
							return err
						}
						if err := q.Wait(context.Background()); err != nil {
							return err
						}
						rows[r.r] = q.Staging().Dst.RowCopies
						return nil
					})
					for i, d := range dsts {
						if d == nil {
							continue
						}
						require.Positive(t, rows[i], "post %d: rank %d copied no rows", post, i)
						got := readMem(t, d.Addr(), mem.Sim, n*block)
						for j := range n {
							var want []byte
							if typ == coll.Gather || typ == coll.Allgather {
								want = srcs[j][:block]
							} else {
								want = srcs[j][i*block : (i+1)*block]
							}
							testutil.Equal(t, want, got[j*block:(j+1)*block], fmt.Sprintf("post %d: rank %d's block %d", post, i, j))
						}
					}
				}
			})
		}
	}
}
