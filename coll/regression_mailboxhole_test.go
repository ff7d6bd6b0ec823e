package coll_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll"
)

// mailboxes opens one mailbox per rank of oobs, and a listener on rank to that
// records what it receives from each rank.
func mailboxes(t *testing.T, oobs []coll.OOB, to int) ([]coll.Mailbox, func(from int) int) {
	boxes := make([]coll.Mailbox, len(oobs))
	for r := range oobs {
		var err error
		boxes[r], err = oobs[r].(coll.Messenger).Mailbox()
		require.NoError(t, err)
	}
	var mu sync.Mutex
	got := make([]int, len(oobs))
	boxes[to].Listen(func(from int, msg []byte) {
		if len(msg) == 0 {
			return
		}
		mu.Lock()
		got[from]++
		mu.Unlock()
	})
	return boxes, func(from int) int {
		mu.Lock()
		defer mu.Unlock()
		return got[from]
	}
}

// TestMailboxCloseLeavesNoHole: rank 0 queues a burst for rank 1 and closes its
// mailbox at once, so that its sender is stopped between taking a slot's number and
// setting the message; the slot is filled all the same, and a message that rank 2
// sends to rank 1 afterwards arrives. (Before, the empty slot stopped rank 1's mailbox
// for good: found by a review, every try lost rank 2's message.)
func TestMailboxCloseLeavesNoHole(t *testing.T) {
	for try := 0; try < 10; try++ {
		boxes, got := mailboxes(t, tcpOOBs(t, 3), 1)
		for i := 0; i < 200; i++ {
			require.NoError(t, boxes[0].Send(1, []byte("burst")))
		}
		boxes[0].Close("rank 0 leaves")
		require.NoError(t, boxes[2].Send(1, []byte("from rank 2")))
		deadline := time.Now().Add(5 * time.Second)
		for got(2) == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		require.Equal(t, 1, got(2), "try %d: rank 2's message to rank 1 (rank 1 got %d of rank 0's 200)", try, got(0))
		boxes[2].Close("")
		boxes[1].Close("")
	}
}

// TestMailboxPassesOverHole: a rank that took a slot of rank 1's mailbox and died
// before it set the message (here bare Adds on the slot counter, as such a rank
// leaves it) leaves a hole; rank 1 passes over it once a later slot is taken and the
// hole stayed empty for the grace, two holes in a row too, so rank 2's messages
// behind them arrive.
func TestMailboxPassesOverHole(t *testing.T) {
	defer coll.SetMailboxHoles(50*time.Millisecond, 300*time.Millisecond)()
	srv, err := bootstrap.NewServer("127.0.0.1:0", bootstrap.ServerOptions{})
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	oobs := make([]coll.OOB, 3)
	var dead *bootstrap.Client
	for r := range oobs {
		c, err := bootstrap.Dial(ctx, srv.Addr().String(), bootstrap.ClientOptions{})
		require.NoError(t, err)
		defer c.Close()
		if r == 0 {
			dead = c
		}
		oobs[r], err = coll.TCPOOBNamed(c, "hole", r, 3)
		require.NoError(t, err)
	}
	boxes, got := mailboxes(t, oobs, 1)
	defer boxes[1].Close("")
	defer boxes[2].Close("")
	// Rank 0's share of the protocol, cut short twice: two slots' numbers, no
	// message (two holes in a row).
	for want := int64(1); want <= 2; want++ {
		k, err := dead.Add(ctx, "hole/mb/0/1/n", 1)
		require.NoError(t, err)
		require.Equal(t, want, k, "the test's key is rank 1's slot counter")
	}
	start := time.Now()
	for i := 0; i < 3; i++ {
		require.NoError(t, boxes[2].Send(1, []byte("from rank 2")))
	}
	for got(2) < 3 && time.Since(start) < 10*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, 3, got(2), "rank 2's messages behind the hole")
	require.GreaterOrEqual(t, time.Since(start), 600*time.Millisecond, "passed over the holes before their grace")
	t.Logf("delivered %v after the hole", time.Since(start))
}
