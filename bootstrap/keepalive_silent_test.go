package bootstrap

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freezer is a TCP proxy to a server that can go silent: once frozen it forwards
// nothing in either direction and keeps both connections open, as a store host that
// lost power or was cut off by the network looks to its clients (no reset, no FIN).
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	held   atomic.Int64 // bytes it kept back once frozen: the freeze took effect
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &freezer{ln: ln}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, in, out)
			f.mu.Unlock()
			go f.pipe(in, out)
			go f.pipe(out, in)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	return f
}

func (f *freezer) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if f.frozen.Load() {
				f.held.Add(int64(n))
			} else if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestKeepAliveNoticesSilentStore: a client whose store goes silent without closing
// the connection fails with ErrDisconnected once a ping stays unanswered for two
// intervals, and a Get blocked on the store returns that error; it does not wait for
// TCP's retransmissions to give up. A client whose store answers stays up across
// many more intervals.
func TestKeepAliveNoticesSilentStore(t *testing.T) {
	defer func(g time.Duration) { pingGrace = g }(pingGrace)
	pingGrace = 200 * time.Millisecond
	s := newServer(t, ServerOptions{})
	f := newFreezer(t, s.Addr().String())
	ctx := testCtx(t, 20*time.Second)
	c, err := Dial(ctx, f.ln.Addr().String(), ClientOptions{KeepAlive: 50 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()

	// Answered pings keep it up (many intervals, well past the grace).
	time.Sleep(time.Second)
	require.NoError(t, c.Err())
	require.NoError(t, c.Ping(ctx))

	got := make(chan error, 1)
	go func() { _, err := c.Get(ctx, "never"); got <- err }()
	time.Sleep(100 * time.Millisecond)
	f.frozen.Store(true)
	start := time.Now()
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrDisconnected)
		require.ErrorContains(t, err, "answered no keepalive")
	case <-ctx.Done():
		t.Fatal("a Get on a silent store never returned")
	}
	require.Positive(t, f.held.Load(), "the freeze kept no ping back: it never took effect")
	require.ErrorIs(t, c.Err(), ErrDisconnected)
	t.Logf("silent store noticed after %v", time.Since(start).Round(time.Millisecond))
}
