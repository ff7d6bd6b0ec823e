package coll_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestRegressionWrongLeft: news that a peer closed its team may be wrong (a garbled
// or forged "left", or a mailbox that refused a message), and a rank that believed it
// sent that live peer nothing more: FuzzTeamControl's forged "left" made rank 0 send a
// live rank neither the signature check's verdict (a "left" naming a later
// collective) nor the abort of the collectives the news failed there (one naming
// collective 0), and the rank waited out its deadline. While the link is up the peer
// is still told. In a team of two no third rank can relay the news, so the old code
// failed every run; at three ranks it depended on the order of delivery. Every Wait
// must return well before the Timeout, on every rank.
func TestRegressionWrongLeft(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const timeout = 4 * time.Second
	left := func(from uint64, origin uint32) []byte {
		b := make([]byte, 24)
		b[0] = wireLeft
		binary.LittleEndian.PutUint64(b[4:], from)
		binary.LittleEndian.PutUint32(b[16:], origin)
		return b
	}
	for _, n := range []int{2, 3} {
		for _, from := range []uint64{0, 1, 48} {
			t.Run(fmt.Sprintf("n=%d/from=%d", n, from), func(t *testing.T) {
				h := newFakeHubIntn(n, fakePolicy{}, func(int) int { return 0 })
				defer fakeHubs.Delete(h.dev)
				w, err := startFakeWorld(h, func(int) coll.Config {
					return coll.Config{Timeout: timeout, AbortGrace: coll.MinAbortGrace}
				})
				require.NoError(t, err)
				liar := n - 1
				// Rank 0 hears that the last rank closed its team before collective from.
				require.NoError(t, h.eps[liar].SendCtl(0, left(from, uint32(liar))))
				ctx, cancel := context.WithTimeout(context.Background(), timeout*2)
				defer cancel()
				took := make([][2]time.Duration, n)
				w.run(func(rank int, tm *coll.Team) error {
					for i, a := range []coll.Args{allreduceArgs(false, 4), barrierArgs(false)} {
						start := time.Now()
						req, err := tm.Init(a)
						if err != nil {
							continue
						}
						_ = req.Post()
						_ = req.Wait(ctx) // the news fails some of them: an error is fine
						took[rank][i] = time.Since(start)
						if err := req.Close(); err != nil {
							return err
						}
					}
					return nil
				})
				for r := range took {
					for i, d := range took[r] {
						require.Less(t, d, timeout/2, "rank %d collective %d waited for its deadline", r, i)
					}
				}
				require.NoError(t, w.close())
			})
		}
	}
}
