package coll_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll"
)

func TestTCPOOB(t *testing.T) {
	srv, err := bootstrap.NewServer("127.0.0.1:0", bootstrap.ServerOptions{})
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 5
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				c, err := bootstrap.Dial(ctx, srv.Addr().String(), bootstrap.ClientOptions{})
				if err != nil {
					return err
				}
				defer c.Close()
				oob, err := coll.TCPOOB(c, r, n)
				if err != nil {
					return err
				}
				if oob.Rank() != r || oob.Size() != n {
					return fmt.Errorf("rank/size %d/%d", oob.Rank(), oob.Size())
				}
				for round := 0; round < 20; round++ {
					all, err := oob.Allgather(ctx, []byte(fmt.Sprintf("r%d-%d", r, round)))
					if err != nil {
						return err
					}
					for p, b := range all {
						if string(b) != fmt.Sprintf("r%d-%d", p, round) {
							return fmt.Errorf("round %d: rank %d sent %q", round, p, b)
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	_, err = coll.TCPOOB(nil, 0, 1)
	require.ErrorIs(t, err, coll.ErrInvalid)
}
