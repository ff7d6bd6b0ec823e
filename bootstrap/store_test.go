package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/stretchr/testify/require"
)

func TestSetGet(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	a, b := dial(t, s, ClientOptions{}), dial(t, s, ClientOptions{})
	ctx := testCtx(t, 10*time.Second)
	rng := testutil.Rand(t)

	val := make([]byte, 1000)
	testutil.Fill(rng, val)
	require.NoError(t, a.Set(ctx, "k", val))
	got, err := b.Get(ctx, "k")
	require.NoError(t, err)
	testutil.Equal(t, val, got, "get after set")

	// Set replaces; the caller's slice is not retained.
	val2 := make([]byte, 3)
	testutil.Fill(rng, val2)
	require.NoError(t, a.Set(ctx, "k", val2))
	want := append([]byte{}, val2...)
	val2[0]++
	got, err = b.Get(ctx, "k")
	require.NoError(t, err)
	testutil.Equal(t, want, got, "get after replace")

	// An empty value is a value.
	require.NoError(t, a.Set(ctx, "empty", nil))
	got, err = b.Get(ctx, "empty")
	require.NoError(t, err)
	require.Empty(t, got)

	// Get blocks until the key appears.
	big := make([]byte, 4<<20)
	testutil.Fill(rng, big)
	res := make(chan []byte, 1)
	go func() {
		v, err := b.Get(ctx, "later")
		if err != nil {
			t.Error(err)
		}
		res <- v
	}()
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 1 }, "get registered as waiter")
	select {
	case <-res:
		t.Fatal("get returned before the key was set")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, a.Set(ctx, "later", big))
	testutil.Equal(t, big, <-res, "blocked get")

	keys, bytes, waiting := s.stats()
	require.Equal(t, 3, keys)
	require.Equal(t, int64(len("k")+3+len("empty")+len("later")+len(big)), bytes)
	require.Zero(t, waiting)

	// Argument checks happen before anything is sent.
	_, err = a.Get(ctx, "")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, a.Set(ctx, string(make([]byte, MaxKeyLen+1)), nil), ErrTooLarge)
}

func TestWaitCheckDelete(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	a, b := dial(t, s, ClientOptions{}), dial(t, s, ClientOptions{})
	ctx := testCtx(t, 10*time.Second)

	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx, "x", "y", "x", "z") }()
	ok, err := a.Check(ctx, "x", "y", "z")
	require.NoError(t, err)
	require.False(t, ok)
	for _, k := range []string{"y", "x"} {
		require.NoError(t, a.Set(ctx, k, []byte(k)))
		select {
		case err := <-done:
			t.Fatalf("wait returned (%v) with z missing", err)
		case <-time.After(30 * time.Millisecond):
		}
	}
	_, err = a.Add(ctx, "z", 5)
	require.NoError(t, err)
	require.NoError(t, <-done)
	ok, err = a.Check(ctx, "x", "y", "z")
	require.NoError(t, err)
	require.True(t, ok)

	// Wait on keys that exist returns at once.
	require.NoError(t, b.Wait(ctx, "z"))

	found, err := a.Delete(ctx, "x")
	require.NoError(t, err)
	require.True(t, found)
	found, err = a.Delete(ctx, "x")
	require.NoError(t, err)
	require.False(t, found)
	ok, err = a.Check(ctx, "x")
	require.NoError(t, err)
	require.False(t, ok)
	keys, bytes, waiting := s.stats()
	require.Equal(t, 2, keys)
	require.Equal(t, int64(len("y")+1+len("z")+1), bytes)
	require.Zero(t, waiting)

	require.ErrorIs(t, a.Wait(ctx), ErrInvalid)
	require.ErrorIs(t, a.Wait(ctx, make([]string, MaxWaitKeys+1)...), ErrTooLarge)
}

func TestAdd(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	ctx := testCtx(t, 20*time.Second)
	const clients, goroutines, adds = 4, 4, 50
	var wg sync.WaitGroup
	seen := make(chan int64, clients*goroutines*adds)
	for range clients {
		c := dial(t, s, ClientOptions{})
		for range goroutines {
			wg.Go(func() {
				for range adds {
					n, err := c.Add(ctx, "n", 2)
					if err != nil {
						t.Error(err)
						return
					}
					seen <- n
				}
			})
		}
	}
	wg.Wait()
	close(seen)
	// Atomic: every total from 2 to 2*count is returned exactly once.
	got := make(map[int64]bool)
	for n := range seen {
		require.False(t, got[n], "total %d returned twice", n)
		got[n] = true
	}
	const total = 2 * clients * goroutines * adds
	for n := int64(2); n <= total; n += 2 {
		require.True(t, got[n], "total %d never returned", n)
	}

	c := dial(t, s, ClientOptions{})
	v, err := c.Get(ctx, "n")
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(total), string(v), "counters read back as decimal text")
	n, err := c.Add(ctx, "n", -total-7)
	require.NoError(t, err)
	require.EqualValues(t, -7, n)

	require.NoError(t, c.Set(ctx, "text", []byte("12a")))
	_, err = c.Add(ctx, "text", 1)
	require.ErrorIs(t, err, ErrNotInteger)
	require.NoError(t, c.Set(ctx, "max", []byte(strconv.FormatInt(1<<63-1, 10))))
	_, err = c.Add(ctx, "max", 1)
	require.ErrorIs(t, err, ErrNotInteger)
	require.ErrorContains(t, err, "overflows")
	n, err = c.Add(ctx, "max", 0)
	require.NoError(t, err)
	require.EqualValues(t, int64(1<<63-1), n, "a failed add leaves the counter as it was")
	healthy(t, s, "")
}

func TestConcurrentCallsOneClient(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	c := dial(t, s, ClientOptions{MaxInflight: 8})
	setter := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 20*time.Second)
	rng := testutil.Rand(t)

	// Blocked Gets must not hold up other calls on the same client, even
	// beyond MaxInflight of other traffic.
	const blocked = 4
	vals := make([][]byte, blocked)
	var wg sync.WaitGroup
	for i := range blocked {
		vals[i] = make([]byte, 1+rng.IntN(5000))
		testutil.Fill(rng, vals[i])
		wg.Go(func() {
			v, err := c.Get(ctx, fmt.Sprint("blocked/", i))
			if err != nil {
				t.Error(err)
				return
			}
			if d := testutil.FirstDiff(vals[i], v); d >= 0 {
				t.Errorf("blocked get %d: first difference at %d", i, d)
			}
		})
	}
	var wg2 sync.WaitGroup
	for g := range 16 {
		wg2.Go(func() {
			for j := range 20 {
				key := fmt.Sprintf("g%d/%d", g, j)
				val := []byte(key + "/value")
				if err := c.Set(ctx, key, val); err != nil {
					t.Error(err)
					return
				}
				v, err := c.Get(ctx, key)
				if err != nil || string(v) != string(val) {
					t.Errorf("get %s: %q, %v", key, v, err)
					return
				}
			}
		})
	}
	wg2.Wait()
	for i := range blocked {
		require.NoError(t, setter.Set(ctx, fmt.Sprint("blocked/", i), vals[i]))
	}
	wg.Wait()
}

func TestGetDeadline(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	c := dial(t, s, ClientOptions{})

	for _, d := range []time.Duration{0, time.Millisecond, 100 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		start := time.Now()
		_, err := c.Get(ctx, "never")
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), d+time.Second, "get returned late")
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	require.ErrorIs(t, c.Wait(ctx, "never", "nor"), context.Canceled)

	// The server forgets the canceled waiters; the client stays usable.
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 0 }, "canceled waiters removed")
	ctx = testCtx(t, 5*time.Second)
	require.NoError(t, c.Set(ctx, "never", []byte("now")))
	v, err := c.Get(ctx, "never")
	require.NoError(t, err)
	require.Equal(t, "now", string(v))
}

func TestDisconnectDropsWaiters(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	c := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 10*time.Second)
	errs := make(chan error, 3)
	go func() { _, err := c.Get(ctx, "a"); errs <- err }()
	go func() { errs <- c.Wait(ctx, "b", "c") }()
	go func() { errs <- c.Barrier(ctx, "never", 2) }()
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 4 }, "4 waiters registered")
	require.NoError(t, c.Close())
	for range 3 {
		require.ErrorIs(t, <-errs, ErrClosed)
	}
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 0 }, "waiters of a closed client removed")
	require.NoError(t, c.Close(), "Close twice")
	require.ErrorIs(t, c.Set(ctx, "a", nil), ErrClosed)
	var nilClient *Client
	require.NoError(t, nilClient.Close())
	healthy(t, s, "")
}

func TestServerCloseUnblocksClients(t *testing.T) {
	t.Parallel()
	s, err := NewServer("127.0.0.1:0", ServerOptions{})
	require.NoError(t, err)
	ctx := testCtx(t, 20*time.Second)
	var clients []*Client
	errs := make(chan error, 8)
	for i := range 8 {
		c, err := Dial(ctx, s.Addr().String(), ClientOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
		go func() {
			if i%2 == 0 {
				_, err = c.Get(ctx, "never")
			} else {
				_, err = c.Allgather(ctx, i, 9, "t", []byte("x"))
			}
			errs <- err
		}()
	}
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w >= 8 }, "all clients blocked")
	start := time.Now()
	require.NoError(t, s.Close())
	for range 8 {
		require.ErrorIs(t, <-errs, ErrDisconnected)
	}
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, s.Close(), "Close twice")
	require.ErrorIs(t, clients[0].Ping(ctx), ErrDisconnected)
	var nilServer *Server
	require.NoError(t, nilServer.Close())
}

func TestDialBeforeServer(t *testing.T) {
	t.Parallel()
	// Reserve a free port, release it, and start the server there only
	// after the client has begun dialing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ctx := testCtx(t, 20*time.Second)
	type dialed struct {
		c   *Client
		err error
	}
	res := make(chan dialed, 1)
	go func() {
		c, err := Dial(ctx, addr, ClientOptions{})
		res <- dialed{c, err}
	}()
	time.Sleep(300 * time.Millisecond)
	s, err := NewServer(addr, ServerOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	d := <-res
	require.NoError(t, d.err)
	t.Cleanup(func() { d.c.Close() })
	require.NoError(t, d.c.Ping(ctx))

	// With nothing to find, Dial gives up when its context ends and says
	// what the last attempt met.
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, err = Dial(short, dead, ClientOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "last attempt")
}

func TestAuth(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{Token: "correct horse"})
	ctx := testCtx(t, 10*time.Second)

	c := dial(t, s, ClientOptions{Token: "correct horse"})
	require.NoError(t, c.Ping(ctx))

	for _, tok := range []string{"wrong", "correct hors", "correct horse!", "\x00"} {
		start := time.Now()
		_, err := Dial(ctx, s.Addr().String(), ClientOptions{Token: tok})
		require.ErrorIs(t, err, ErrAuth, "token %q", tok)
		require.Less(t, time.Since(start), 2*time.Second, "a rejected token is not retried")
	}

	// A raw peer with the wrong token gets an auth error and is dropped.
	nc := rawConn(t, s)
	head, _ := encodeRequest(&request{op: opHello, token: []byte("guess")}).frame()
	_, err := nc.Write(head)
	require.NoError(t, err)
	requireErrorFrame(t, requireDropped(t, nc, 5*time.Second), codeAuth)

	// A request before the hello is refused too.
	nc = rawConn(t, s)
	head, tail := encodeRequest(&request{op: opSet, id: 1, key: "k", value: []byte("v")}).frame()
	_, err = nc.Write(append(head, tail...))
	require.NoError(t, err)
	requireErrorFrame(t, requireDropped(t, nc, 5*time.Second), codeProtocol)
	keys, _, _ := s.stats()
	require.Zero(t, keys, "nothing stored by an unauthenticated peer")
	require.NoError(t, c.Ping(ctx))
}

// The token comes from the launcher environment through Detect, and Connect uses it
// on both sides; the library itself reads no environment.
func TestAuthFromEnv(t *testing.T) {
	vars := map[string]string{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "1", StoreEnv: "127.0.0.1:1", TokenEnv: "from-env"}
	env, ok, err := Detect(func(k string) string { return vars[k] })
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "from-env", env.Token)
	c, srv, err := Connect(testCtx(t, 5*time.Second), env, ConnectOptions{ListenAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	defer srv.Close()
	defer c.Close()
	require.NoError(t, c.Ping(testCtx(t, 5*time.Second)))
	_, err = Dial(testCtx(t, 5*time.Second), srv.Addr().String(), ClientOptions{Token: "other"})
	require.ErrorIs(t, err, ErrAuth)
	_, err = Dial(testCtx(t, 5*time.Second), srv.Addr().String(), ClientOptions{})
	require.ErrorIs(t, err, ErrAuth, "no token: the environment is not read behind the caller's back")
}

func TestLimits(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{MaxValueSize: 100, MaxKeys: 4, MaxBytes: 250})
	c := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 10*time.Second)
	require.Equal(t, 100, c.MaxValueSize())

	require.NoError(t, c.Set(ctx, "a", make([]byte, 100)))
	err := c.Set(ctx, "b", make([]byte, 101))
	require.ErrorIs(t, err, ErrTooLarge)
	require.NoError(t, c.Set(ctx, "b", make([]byte, 100)))
	err = c.Set(ctx, "c", make([]byte, 100))
	require.ErrorIs(t, err, ErrStoreFull, "over MaxBytes")
	require.NoError(t, c.Set(ctx, "c", make([]byte, 10)))
	require.NoError(t, c.Set(ctx, "d", nil))
	err = c.Set(ctx, "e", nil)
	require.ErrorIs(t, err, ErrStoreFull, "over MaxKeys")
	_, err = c.Add(ctx, "e", 1)
	require.ErrorIs(t, err, ErrStoreFull)
	require.NoError(t, c.Set(ctx, "d", []byte("replacing is fine")))
	_, err = c.Delete(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, "e", nil))
	require.NoError(t, c.Ping(ctx), "limit errors keep the connection")

	// A raw peer that ignores the limit is dropped.
	nc := rawConn(t, s)
	rawHello(t, nc, "")
	head, tail := encodeRequest(&request{op: opSet, id: 1, key: "big", value: make([]byte, 101)}).frame()
	_, err = nc.Write(append(head, tail...))
	require.NoError(t, err)
	requireErrorFrame(t, requireDropped(t, nc, 5*time.Second), codeProtocol)
	require.NoError(t, c.Ping(ctx))

	_, err = NewServer("127.0.0.1:0", ServerOptions{MaxValueSize: MaxValueSizeLimit + 1})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestMaxWaiting(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{MaxWaiting: 3})
	c := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 10*time.Second)
	require.NoError(t, c.Set(ctx, "here", nil))

	err := c.Wait(ctx, "a", "b", "c", "d", "here")
	require.ErrorIs(t, err, ErrStoreFull)
	errs := make(chan error, 2)
	go func() { errs <- c.Wait(ctx, "a", "b", "a", "here") }()
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 2 }, "duplicates and present keys not counted")
	go func() { _, err := c.Get(ctx, "c"); errs <- err }()
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 3 }, "get waiting")
	_, err = c.Get(ctx, "d")
	require.ErrorIs(t, err, ErrStoreFull)
	require.NoError(t, c.Wait(ctx, "here"), "present keys need no room")
	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, c.Set(ctx, k, nil))
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	_, _, w := s.stats()
	require.Zero(t, w)
}

func TestMaxConns(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{MaxConns: 2})
	a := dial(t, s, ClientOptions{})
	dial(t, s, ClientOptions{})
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Dial(short, s.Addr().String(), ClientOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded, "a third connection is refused")

	ctx := testCtx(t, 10*time.Second)
	res := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, s.Addr().String(), ClientOptions{})
		if err == nil {
			err = c.Ping(ctx)
			c.Close()
		}
		res <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, a.Close())
	require.NoError(t, <-res, "a retrying Dial gets the freed slot")
}

// TestBadPeers runs misbehaving raw peers against a server while good
// clients keep working, then checks the server is unharmed.
func TestBadPeers(t *testing.T) {
	t.Parallel()
	opts := ServerOptions{
		MaxValueSize:     1 << 20,
		MaxInflight:      4,
		HandshakeTimeout: 300 * time.Millisecond,
		ReadTimeout:      300 * time.Millisecond,
		IdleTimeout:      600 * time.Millisecond,
		Token:            "tok",
	}
	s := newServer(t, opts)
	good := dial(t, s, ClientOptions{Token: "tok"})
	ctx := testCtx(t, 30*time.Second)

	// Good traffic runs throughout.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprint("good/", i)
			if err := good.Set(ctx, key, []byte(key)); err != nil {
				t.Error(err)
				return
			}
			if v, err := good.Get(ctx, key); err != nil || string(v) != key {
				t.Errorf("get %s: %q %v", key, v, err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})

	frame := func(r request) []byte {
		head, tail := encodeRequest(&r).frame()
		return append(append([]byte{}, head...), tail...)
	}
	lenPrefix := func(n uint32) []byte { return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }
	cases := []struct {
		name  string
		hello bool
		send  []byte
		code  errCode // 0: dropped without a response
	}{
		{"garbage", false, []byte("GET / HTTP/1.1\r\nHost: store\r\n\r\n"), codeProtocol},
		{"huge length before hello", false, lenPrefix(1<<32 - 1), codeProtocol},
		{"huge length", true, lenPrefix(1<<32 - 1), codeProtocol},
		{"bad version", true, append(lenPrefix(10), 9, byte(opPing), 0, 0, 0, 0, 0, 0, 0, 1), codeProtocol},
		{"unknown op", true, append(lenPrefix(10), ProtocolVersion, 77, 0, 0, 0, 0, 0, 0, 0, 1), codeProtocol},
		{"second hello", true, frame(request{op: opHello, id: 5, token: []byte("tok")}), codeProtocol},
		{"no hello", false, nil, 0},
		{"stall in hello", false, lenPrefix(20), 0},
		{"stall mid-message", true, append(lenPrefix(1000), ProtocolVersion, byte(opSet)), 0},
		{"announce 1 MiB, send 10 bytes", true, append(lenPrefix(1<<20), make([]byte, 10)...), 0},
		{"idle after hello", true, nil, 0},
	}
	// The group returns once all its parallel subtests are done.
	t.Run("peers", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				nc := rawConn(t, s)
				if c.hello {
					rawHello(t, nc, "tok")
				}
				_, err := nc.Write(c.send)
				require.NoError(t, err)
				got := requireDropped(t, nc, 5*time.Second)
				if c.code != 0 {
					requireErrorFrame(t, got, c.code)
				} else {
					require.Empty(t, got, "bytes before the drop")
				}
			})
		}
	})

	// Too many requests in flight: blocked gets past MaxInflight.
	nc := rawConn(t, s)
	rawHello(t, nc, "tok")
	var flood []byte
	for i := range opts.MaxInflight + 1 {
		flood = append(flood, frame(request{op: opGet, id: uint64(i + 1), key: "never"})...)
	}
	_, err := nc.Write(flood)
	require.NoError(t, err)
	requireErrorFrame(t, requireDropped(t, nc, 5*time.Second), codeProtocol)

	close(stop)
	wg.Wait()
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 0 }, "waiters of dropped peers removed")
	require.NoError(t, good.Ping(ctx))
	healthy(t, s, "tok")
}

func TestKeepAlive(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{IdleTimeout: 300 * time.Millisecond})
	c := dial(t, s, ClientOptions{})
	require.Equal(t, 100*time.Millisecond, c.keepAlive, "a third of the server's idle timeout")
	ctx := testCtx(t, 10*time.Second)

	// Blocked well past the idle timeout, the client is kept alive by pings.
	res := make(chan error, 1)
	go func() { _, err := c.Get(ctx, "late"); res <- err }()
	time.Sleep(time.Second)
	setter := dial(t, s, ClientOptions{})
	require.NoError(t, setter.Set(ctx, "late", []byte("x")))
	require.NoError(t, <-res)

	// Blocked Gets in every slot do not starve the keepalive.
	tight := newServer(t, ServerOptions{IdleTimeout: 300 * time.Millisecond, MaxInflight: 3})
	c = dial(t, tight, ClientOptions{})
	require.Equal(t, 2, cap(c.sem))
	errs := make(chan error, 2)
	for i := range 2 {
		go func() { _, err := c.Get(ctx, fmt.Sprint("slot/", i)); errs <- err }()
	}
	time.Sleep(time.Second)
	setter = dial(t, tight, ClientOptions{})
	for i := range 2 {
		require.NoError(t, setter.Set(ctx, fmt.Sprint("slot/", i), nil))
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)

	// Without pings the server drops the client.
	quiet := dial(t, s, ClientOptions{KeepAlive: -1})
	time.Sleep(time.Second)
	require.ErrorIs(t, quiet.Ping(ctx), ErrDisconnected)
}

func TestClientErrorsAreTyped(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	c := dial(t, s, ClientOptions{})
	require.NoError(t, c.Close())
	err := c.Set(context.Background(), "k", nil)
	require.True(t, errors.Is(err, ErrClosed), "%v", err)
	require.ErrorContains(t, err, `set "k"`)
}

// TestSlowReader: a peer that asks for large values and never reads the
// answers is dropped once a write stalls for WriteTimeout; its queued
// responses do not pile up, and others are served throughout.
func TestSlowReader(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{MaxValueSize: 1 << 20, WriteTimeout: 300 * time.Millisecond})
	good := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, good.Set(ctx, "big", make([]byte, 1<<20)))

	nc := rawConn(t, s)
	rawHello(t, nc, "")
	var reqs []byte
	for i := range 64 {
		head, _ := encodeRequest(&request{op: opGet, id: uint64(i + 1), key: "big"}).frame()
		reqs = append(reqs, head...)
	}
	_, err := nc.Write(reqs)
	require.NoError(t, err)
	// The peer does not read for a while; meanwhile the store works.
	for i := range 20 {
		require.NoError(t, good.Set(ctx, fmt.Sprint("k", i), []byte("v")))
		time.Sleep(25 * time.Millisecond)
	}
	// By now the server gave up on it: reading drains what the kernel
	// buffered and then meets the end.
	start := time.Now()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := io.Copy(io.Discard, nc) // ends in a FIN or a reset
	require.Less(t, n, int64(64<<20), "not every response was delivered")
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, good.Ping(ctx))
}

// TestDrain: Drain waits for the last client to leave while the store keeps
// serving (a client still gets, and one that dies fires its will for the
// others), and a context that ends first says how many stay.
func TestDrain(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	ctx := testCtx(t, 10*time.Second)
	require.NoError(t, s.Drain(ctx), "no clients: nothing to wait for")
	a, b := dial(t, s, ClientOptions{}), dial(t, s, ClientOptions{})
	require.NoError(t, a.Will(ctx, "a/died", []byte("a")))

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := s.Drain(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "2 client(s) still connected")

	drained := make(chan error, 1)
	go func() { drained <- s.Drain(ctx) }()
	require.NoError(t, a.nc.Close(), "a dropped connection: a dead process")
	got, err := b.Get(ctx, "a/died")
	require.NoError(t, err, "the store serves while it drains")
	require.Equal(t, "a", string(got), "the leaving client's will fired")
	select {
	case err := <-drained:
		t.Fatalf("Drain returned with a client connected: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, b.Close())
	select {
	case err := <-drained:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Drain did not return after the last client left")
	}
	var nilServer *Server
	require.NoError(t, nilServer.Drain(ctx))
}
