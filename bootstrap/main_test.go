package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	testutil.LeakCheck(m, leakedGoroutines)
}

// leakedGoroutines reports goroutines still running this package's code
// once every test has closed its servers and clients.
func leakedGoroutines() error {
	var stacks string
	for deadline := time.Now().Add(5 * time.Second); ; {
		stacks = ownGoroutines()
		if stacks == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("goroutines left running:\n%s", stacks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ownGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var own []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "ibcoll/bootstrap.") && !strings.Contains(g, "bootstrap.TestMain") {
			own = append(own, g)
		}
	}
	return strings.Join(own, "\n\n")
}

// testCtx is a context that ends before the test's own deadline.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newServer(t *testing.T, opts ServerOptions) *Server {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	s, err := NewServer("127.0.0.1:0", opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		opts.Logf = nil
		require.NoError(t, s.Close())
	})
	return s
}

func dial(t *testing.T, s *Server, opts ClientOptions) *Client {
	t.Helper()
	c, err := Dial(testCtx(t, 10*time.Second), s.Addr().String(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn is a peer that speaks the protocol by hand, or not at all.
func rawConn(t *testing.T, s *Server) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	return nc
}

func rawHello(t *testing.T, nc net.Conn, token string) {
	t.Helper()
	head, _ := encodeRequest(&request{op: opHello, token: []byte(token)}).frame()
	_, err := nc.Write(head)
	require.NoError(t, err)
	p, err := readFrame(nc, helloFrameMax, nil)
	require.NoError(t, err)
	r, err := decodeResponse(p, opHello, limits{})
	require.NoError(t, err)
	require.NoError(t, r.err())
}

// requireDropped waits for the server to close nc, reading (and
// returning) whatever it sent first.
func requireDropped(t *testing.T, nc net.Conn, within time.Duration) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(within))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("server did not drop the connection within %v", within)
			}
			return got
		}
	}
}

// requireErrorFrame decodes the error response the server sent before
// dropping a connection.
func requireErrorFrame(t *testing.T, b []byte, code errCode) {
	t.Helper()
	require.Greater(t, len(b), lenSize, "no error response before the drop")
	p, err := readFrame(strings.NewReader(string(b)), helloFrameMax, nil)
	require.NoError(t, err)
	r, err := decodeResponse(p, opPing, limits{})
	require.NoError(t, err)
	require.Equal(t, statusError, r.status)
	require.Equal(t, code, r.code, r.msg)
}

// healthy checks that s still serves: a fresh client sets, gets and adds.
func healthy(t *testing.T, s *Server, token string) {
	t.Helper()
	c := dial(t, s, ClientOptions{Token: token})
	ctx := testCtx(t, 5*time.Second)
	key := fmt.Sprintf("healthy/%p", c)
	require.NoError(t, c.Set(ctx, key, []byte("ok")))
	v, err := c.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "ok", string(v))
	require.NoError(t, c.Close())
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, d, 5*time.Millisecond, append([]any{msg}, args...)...)
}
