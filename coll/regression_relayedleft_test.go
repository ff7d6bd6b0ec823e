package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestRegressionRelayedLeft: a rank says only of itself that it closed its team
// (coll's "left" is never relayed), and whoever believes it stops telling that rank
// anything. FuzzTeamControl's forged "left", sent by one rank and naming another,
// made rank 0 fail the collectives from the one it named and tell the named rank
// neither the verdict of the signature check nor those aborts: a live rank waited out
// its deadline for another's word. Such a message is malformed now and dropped: the
// collectives run as if it had not come, successfully and well before the Timeout,
// on every rank.
func TestRegressionRelayedLeft(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const n, timeout = 3, 4 * time.Second
	for _, from := range []uint64{0, 1, 48} {
		t.Run(fmt.Sprintf("from=%d", from), func(t *testing.T) {
			h := newFakeHubIntn(n, fakePolicy{}, func(int) int { return 0 })
			defer fakeHubs.Delete(h.dev)
			w, err := startFakeWorld(h, func(int) coll.Config {
				return coll.Config{Timeout: timeout, AbortGrace: coll.MinAbortGrace}
			})
			require.NoError(t, err)
			// Rank 1 tells rank 0 that rank 2 closed its team before collective from.
			require.NoError(t, h.eps[1].SendCtl(0, wireMsg(wireLeft, 0, from, 0, 2, 0)))
			ctx, cancel := context.WithTimeout(context.Background(), timeout*2)
			defer cancel()
			type outcome struct {
				err  error
				took time.Duration
			}
			got := make([][2]outcome, n)
			errs := w.run(func(rank int, tm *coll.Team) error {
				for i, a := range []coll.Args{allreduceArgs(false, 4), barrierArgs(false)} {
					start := time.Now()
					req, err := tm.Init(a)
					if err != nil {
						got[rank][i] = outcome{err, time.Since(start)}
						continue
					}
					err = req.Post()
					if werr := req.Wait(ctx); err == nil {
						err = werr
					}
					got[rank][i] = outcome{err, time.Since(start)}
					if err := req.Close(); err != nil {
						return err
					}
				}
				return nil
			})
			for r := range got {
				require.NoError(t, errs[r], "rank %d", r)
				for i, o := range got[r] {
					require.NoError(t, o.err, "rank %d collective %d", r, i)
					require.Less(t, o.took, timeout/2, "rank %d collective %d", r, i)
				}
			}
			require.NoError(t, w.close())
		})
	}
}
