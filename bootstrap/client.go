package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of ClientOptions.
const (
	// DefaultClientInflight takes all a default server allows (DefaultMaxInflight,
	// less the keepalive's slot): every team over a client holds one blocked Get for
	// its life (coll's TCPOOB mailboxes), so slots bound the teams a client carries.
	DefaultClientInflight = DefaultMaxInflight - 1
	DefaultKeepAlive      = 30 * time.Second
	dialRetryMin          = 10 * time.Millisecond
	dialRetryMax          = 500 * time.Millisecond
)

// ClientOptions configures a Client. The zero value gives the defaults.
type ClientOptions struct {
	// Token is the shared secret the server requires. Empty means
	// $IBCOLL_STORE_TOKEN.
	Token string
	// MaxInflight limits this client's requests in flight
	// (DefaultClientInflight, and never more than the server allows);
	// more wait for a slot.
	MaxInflight int
	// HandshakeTimeout bounds one connection attempt's hello exchange
	// (DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// WriteTimeout bounds writing one request (DefaultWriteTimeout). A
	// write that times out drops the connection, since the stream is
	// then cut mid-frame.
	WriteTimeout time.Duration
	// KeepAlive is the ping interval that keeps an idle connection open.
	// Zero: a third of the server's idle timeout, or DefaultKeepAlive when
	// the server has none; never more than a third of the server's idle
	// timeout. Negative disables pings. A ping unanswered for two intervals
	// (and at least 5 s) fails the client with ErrDisconnected: the store's
	// host is taken for gone.
	KeepAlive time.Duration
}

// Client is a connection to a Server. Its methods are safe for concurrent
// use: requests are multiplexed by id over one TCP connection, so a
// blocked Get does not hold up other calls. When the connection fails,
// every pending and later call fails with an error wrapping
// ErrDisconnected; a Client does not reconnect.
type Client struct {
	opts      ClientOptions
	nc        net.Conn
	lim       limits
	keepAlive time.Duration
	sem       chan struct{} // a slot per request in flight
	pingSlot  chan struct{} // the keepalive's own slot: blocked Gets never starve it
	wlock     chan struct{} // held while writing a frame

	nextID atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*call
	err     error // set once: why the client is unusable
	done    chan struct{}
	wg      sync.WaitGroup

	agMu   sync.Mutex
	rounds map[string]uint64

	// closeMu serializes Close: a second Close returns once the first is done, so it
	// cannot drop the connection while the first still withdraws the wills.
	closeMu sync.Mutex
	closed  bool

	willMu sync.Mutex
	// wills are the keys whose will the server may hold: each is recorded once its
	// request is sent, before the answer, so that Close withdraws it even when the
	// Will that sent it gave up waiting for the answer.
	wills    map[string]bool
	closing  bool           // Close began: Will refuses
	inflight sync.WaitGroup // Wills started, which Close waits for
	// willWire lets one Will at a time on the wire: the server then takes them in the
	// order they end here, so that wills says what it holds (a withdrawal and a will
	// of one key in flight together could otherwise end in either order).
	willWire chan struct{}
	// closeCtx ends when Close begins: a Will still waiting for the wire or an
	// answer gives up, so that Close waits for nothing that has not been sent.
	closeCtx    context.Context
	closeCancel context.CancelFunc
}

type call struct {
	op   op
	id   uint64
	slot chan struct{} // the in-flight slot it holds
	ch   chan result   // buffered: the reader never waits for the caller
}

type result struct {
	r   response
	err error
}

// Dial connects to the server at addr (host:port). Until ctx ends it
// retries refused connections and failed handshakes, so clients may start
// before the server; a rejected token or an unsupported protocol version
// fails at once.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	if ctx == nil {
		return nil, fmt.Errorf("bootstrap: dial: %w: nil context.Context", ErrInvalid)
	}
	if len(opts.Token) > MaxTokenLen {
		return nil, fmt.Errorf("%w: token of %d bytes (limit %d)", ErrTooLarge, len(opts.Token), MaxTokenLen)
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = DefaultClientInflight
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	var d net.Dialer
	var lastErr error
	wait := dialRetryMin
	for {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var c *Client
			c, err = handshake(ctx, nc, opts)
			if err == nil {
				return c, nil
			}
			nc.Close()
			if errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) {
				return nil, fmt.Errorf("bootstrap: dial %s: %w", addr, err)
			}
		}
		lastErr = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bootstrap: dial %s: %w (last attempt: %v)", addr, ctx.Err(), lastErr)
		case <-t.C:
		}
		wait = min(2*wait, dialRetryMax)
	}
}

func handshake(ctx context.Context, nc net.Conn, opts ClientOptions) (*Client, error) {
	deadline := time.Now().Add(opts.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	head, _ := encodeRequest(&request{op: opHello, token: []byte(opts.Token)}).frame()
	if _, err := nc.Write(head); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 32<<10)
	p, err := readFrame(br, helloFrameMax, nil)
	if err != nil {
		return nil, err
	}
	r, err := decodeResponse(p, opHello, limits{})
	if err != nil {
		return nil, err
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	if r.maxValue == 0 || r.maxValue > MaxValueSizeLimit || r.maxInflight < 2 {
		return nil, fmt.Errorf("%w: hello with max value %d, max inflight %d", ErrProtocol, r.maxValue, r.maxInflight)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	nc.SetDeadline(time.Time{})

	ka := opts.KeepAlive
	if idle := time.Duration(r.idleMillis) * time.Millisecond; idle > 0 && ka >= 0 {
		if ka == 0 || ka > idle/3 {
			ka = max(idle/3, time.Millisecond)
		}
	} else if ka == 0 {
		ka = DefaultKeepAlive
	}
	c := &Client{
		opts:      opts,
		nc:        nc,
		lim:       newLimits(int(r.maxValue)),
		keepAlive: ka,
		sem:       make(chan struct{}, min(opts.MaxInflight, int(r.maxInflight)-1)),
		pingSlot:  make(chan struct{}, 1),
		wlock:     make(chan struct{}, 1),
		pending:   make(map[uint64]*call),
		done:      make(chan struct{}),
		rounds:    make(map[string]uint64),
		willWire:  make(chan struct{}, 1),
	}
	c.closeCtx, c.closeCancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.readLoop(br)
	if ka > 0 {
		c.wg.Add(1)
		go c.keepAliveLoop()
	}
	return c, nil
}

// usable refuses a nil or zero Client (only Dial makes one) and a nil ctx, naming
// the call.
func (c *Client) usable(ctx context.Context, op string) error {
	switch {
	case c == nil || c.done == nil:
		return fmt.Errorf("bootstrap: %s: %w: nil or zero Client (only Dial makes a usable one)", op, ErrInvalid)
	case ctx == nil:
		return fmt.Errorf("bootstrap: %s: %w: nil context.Context", op, ErrInvalid)
	}
	return nil
}

// Slots is how many requests the client may have in flight at once, blocked Gets
// included: MaxInflight, never more than the server allows less the keepalive's
// own (0 for a nil or zero Client).
func (c *Client) Slots() int {
	if c == nil || c.sem == nil {
		return 0
	}
	return cap(c.sem)
}

// MaxValueSize is the largest value the server accepts (0 for a nil Client).
func (c *Client) MaxValueSize() int {
	if c == nil {
		return 0
	}
	return c.lim.maxValue
}

// Close drops the connection: pending calls fail with ErrClosed. It first
// withdraws the client's wills (a Will that has not ended, or starts once Close
// has begun, fails with ErrClosed; one that was sent is withdrawn too). It waits
// for the client's goroutines, and is idempotent and nil-safe: a Close
// concurrent with another returns when that one is done.
func (c *Client) Close() error {
	if c == nil || c.done == nil {
		return nil // nil, or zero: nothing to drop
	}
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	// A client that closes is no dead process: withdraw its wills first, after the
	// Wills already started have ended (a will the server takes after its
	// withdrawal would fire when the connection drops). They end at once: each
	// gives up when closeCtx ends, and one already sent is on the wire before
	// the withdrawals.
	c.willMu.Lock()
	c.closing = true
	c.willMu.Unlock()
	c.closeCancel()
	ctx, cancel := context.WithTimeout(context.Background(), willWithdrawTimeout)
	defer cancel()
	answered := make(chan struct{})
	go func() { c.inflight.Wait(); close(answered) }()
	select {
	case <-answered:
	case <-ctx.Done():
	}
	c.willMu.Lock()
	keys := c.wills
	c.wills = nil
	c.willMu.Unlock()
	if len(keys) > 0 && c.failure() == nil {
		// Through the keepalive's slot, which blocked Gets never hold: Close does
		// not wait for them to free one of theirs.
		for k := range keys {
			cl, err := c.start(ctx, &request{op: opWill, key: k}, c.pingSlot, true)
			if err == nil {
				_, err = c.await(ctx, cl)
			}
			if err != nil {
				break
			}
		}
	}
	c.fail(fmt.Errorf("bootstrap: client closed: %w", ErrClosed))
	c.wg.Wait()
	c.closed = true
	return nil
}

// fail makes the client unusable with err and fails every pending call.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	for _, cl := range pending {
		cl.ch <- result{err: err}
	}
}

// Done is closed when the client can no longer be used: it was closed, or its
// connection to the store dropped (Err says which).
func (c *Client) Done() <-chan struct{} {
	if c == nil || c.done == nil {
		return closedChan // a nil or zero Client is never usable
	}
	return c.done
}

var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Err is nil while the client is usable, else why it is not (wrapping ErrClosed or
// ErrDisconnected).
func (c *Client) Err() error {
	if err := c.usable(context.Background(), "Err"); err != nil {
		return err
	}
	return c.failure()
}

func (c *Client) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	for {
		p, err := readFrame(br, c.lim.maxFrame, nil)
		if err != nil {
			c.fail(fmt.Errorf("%w: %v", ErrDisconnected, err))
			return
		}
		d := decoder{b: p}
		_, id := d.header()
		c.mu.Lock()
		cl := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if d.err != nil || cl == nil {
			// An error before any request (the server dropping us)
			// carries id 0, which no call uses.
			r, derr := decodeResponse(p, opPing, c.lim)
			if derr == nil && r.status == statusError {
				c.fail(fmt.Errorf("%w: server: %w", ErrDisconnected, r.err()))
			} else {
				c.fail(fmt.Errorf("%w: %w: response to unknown request %d", ErrDisconnected, ErrProtocol, id))
			}
			return
		}
		r, err := decodeResponse(p, cl.op, c.lim)
		<-cl.slot
		if err != nil {
			cl.ch <- result{err: err}
			c.fail(fmt.Errorf("%w: %w", ErrDisconnected, err))
			return
		}
		cl.ch <- result{r: r}
	}
}

// pingGrace is the least time a keepalive may go unanswered before the client gives
// the store up (tests shorten it).
var pingGrace = 5 * time.Second

// keepAliveLoop pings every keepAlive, and gives the store up when a ping stays
// unanswered for two intervals (and at least pingGrace): a store host that vanished
// without a reset (powered off, cut off by the network) leaves the connection open,
// and TCP alone would tell only after its retransmissions give up, many minutes on,
// while the ranks blocked on the store wait.
func (c *Client) keepAliveLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.keepAlive)
	defer t.Stop()
	var ping *call // the ping not yet answered
	var sent time.Time
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if ping != nil {
			select {
			case <-ping.ch:
				ping = nil
			default:
				if late := time.Since(sent); late >= max(2*c.keepAlive, pingGrace) {
					c.fail(fmt.Errorf("%w: the store answered no keepalive for %v (its host is gone or the network is cut)",
						ErrDisconnected, late.Round(time.Millisecond)))
					return
				}
				continue
			}
		}
		// Without waiting for a place: the slot is busy only while Close withdraws
		// the wills through it, and then the client is ending anyway.
		cl, err := c.start(context.Background(), &request{op: opPing}, c.pingSlot, false)
		switch {
		case err == nil:
			ping, sent = cl, time.Now()
		case c.failure() != nil:
			return
		}
	}
}

var errSlotBusy = errors.New("bootstrap: in-flight slot busy")

// start sends req and returns its pending call, holding one of slot's
// places until the response arrives. With wait false it fails rather
// than waiting for a place.
func (c *Client) start(ctx context.Context, req *request, slot chan struct{}, wait bool) (*call, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req.id = c.nextID.Add(1)
	e := encodeRequest(req)
	if n := e.payloadLen(); n > c.lim.maxFrame {
		return nil, fmt.Errorf("%w: %v request of %d bytes (limit %d)", ErrTooLarge, req.op, n, c.lim.maxFrame)
	}
	if !wait {
		select {
		case slot <- struct{}{}:
		default:
			return nil, errSlotBusy
		}
	} else {
		select {
		case slot <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, c.failure()
		}
	}
	cl := &call{op: req.op, id: req.id, slot: slot, ch: make(chan result, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		<-slot
		return nil, err
	}
	c.pending[cl.id] = cl
	c.mu.Unlock()

	unregister := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, cl.id)
		}
		c.mu.Unlock()
		<-slot
	}
	select {
	case c.wlock <- struct{}{}:
	case <-ctx.Done():
		unregister()
		return nil, ctx.Err()
	case <-c.done:
		unregister()
		return nil, c.failure()
	}
	head, tail := e.frame()
	err := c.write(head, tail)
	<-c.wlock
	if err != nil {
		// The stream may be cut mid-frame: the connection is lost.
		c.fail(fmt.Errorf("%w: write: %v", ErrDisconnected, err))
		return nil, c.failure()
	}
	return cl, nil
}

func (c *Client) write(head, tail []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	bufs := net.Buffers{head, tail}
	_, err := bufs.WriteTo(c.nc)
	return err
}

// await waits for cl's response. When ctx ends first, a blocked Get or
// Wait is canceled on the server in the background.
func (c *Client) await(ctx context.Context, cl *call) (response, error) {
	select {
	case res := <-cl.ch:
		if res.err != nil {
			return res.r, res.err
		}
		return res.r, res.r.err()
	case <-ctx.Done():
		if cl.op == opGet || cl.op == opWait {
			c.cancelAsync(cl.id)
		}
		return response{}, ctx.Err()
	}
}

func (c *Client) cancelAsync(id uint64) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		select {
		case c.wlock <- struct{}{}:
		case <-c.done:
			return
		}
		head, _ := encodeRequest(&request{op: opCancel, target: id}).frame()
		err := c.write(head, nil)
		<-c.wlock
		if err != nil {
			c.fail(fmt.Errorf("%w: write: %v", ErrDisconnected, err))
		}
	}()
}

func (c *Client) roundTrip(ctx context.Context, req *request) (response, error) {
	if err := c.usable(ctx, req.op.String()); err != nil {
		return response{}, err
	}
	cl, err := c.start(ctx, req, c.sem, true)
	if err != nil {
		return response{}, err
	}
	return c.await(ctx, cl)
}

func opErr(o op, key string, err error) error {
	if key == "" {
		return fmt.Errorf("bootstrap: %v: %w", o, err)
	}
	return fmt.Errorf("bootstrap: %v %q: %w", o, key, err)
}

// Set stores val under key, replacing any value, and wakes the Gets and
// Waits blocked on key. val is not retained after Set returns.
func (c *Client) Set(ctx context.Context, key string, val []byte) error {
	if err := checkKey(key); err != nil {
		return opErr(opSet, key, err)
	}
	if err := c.usable(ctx, opSet.String()); err != nil {
		return err
	}
	if len(val) > c.lim.maxValue {
		return opErr(opSet, key, fmt.Errorf("%w: value of %d bytes (limit %d)", ErrTooLarge, len(val), c.lim.maxValue))
	}
	if _, err := c.roundTrip(ctx, &request{op: opSet, key: key, value: val}); err != nil {
		return opErr(opSet, key, err)
	}
	return nil
}

// Will leaves val with the server, to be stored under key if this client's
// connection ends before the will is withdrawn: a process that dies (or loses
// the store) thereby tells everyone who waits for key, within the time the
// server takes to see the connection drop (at once for a process killed on a
// live host: its kernel closes the socket). An empty val withdraws the will,
// and Close withdraws every will of the client first, so that only a
// connection that ends otherwise sets them. A connection holds at most
// MaxWills wills. Closing the server sets none of them.
func (c *Client) Will(ctx context.Context, key string, val []byte) error {
	if err := checkKey(key); err != nil {
		return opErr(opWill, key, err)
	}
	if err := c.usable(ctx, opWill.String()); err != nil {
		return err
	}
	if len(val) > c.lim.maxValue {
		return opErr(opWill, key, fmt.Errorf("%w: value of %d bytes (limit %d)", ErrTooLarge, len(val), c.lim.maxValue))
	}
	closed := opErr(opWill, key, fmt.Errorf("bootstrap: client closed: %w", ErrClosed))
	c.willMu.Lock()
	if c.closing {
		c.willMu.Unlock()
		return closed
	}
	c.inflight.Add(1)
	c.willMu.Unlock()
	defer c.inflight.Done()
	select {
	case c.willWire <- struct{}{}:
	case <-ctx.Done():
		return opErr(opWill, key, ctx.Err())
	case <-c.closeCtx.Done():
		return closed
	}
	defer func() { <-c.willWire }()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.closeCtx, cancel)()
	cl, err := c.start(rctx, &request{op: opWill, key: key, value: val}, c.sem, true)
	if err != nil {
		// Not sent: the server holds what it held.
		if c.closeCtx.Err() != nil && ctx.Err() == nil {
			return closed
		}
		return opErr(opWill, key, err)
	}
	// Sent: from here the server may hold the will, until an answer says otherwise.
	c.willMu.Lock()
	had := c.wills[key]
	if len(val) > 0 {
		if c.wills == nil {
			c.wills = map[string]bool{}
		}
		c.wills[key] = true
	}
	c.willMu.Unlock()
	r, err := c.await(rctx, cl)
	c.willMu.Lock()
	switch {
	case err == nil && len(val) == 0:
		delete(c.wills, key) // withdrawn
	case err != nil && r.status == statusError && !had:
		delete(c.wills, key) // refused: the server holds what it held before
	}
	// Otherwise (no answer) the server may hold it: Close withdraws it.
	c.willMu.Unlock()
	if err != nil {
		if c.closeCtx.Err() != nil && ctx.Err() == nil {
			return closed
		}
		return opErr(opWill, key, err)
	}
	return nil
}

// willWithdrawTimeout bounds Close's withdrawal of the client's wills.
const willWithdrawTimeout = 2 * time.Second

// Get returns the value of key, blocking until some client sets it or ctx
// ends. The caller owns the returned slice.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, opErr(opGet, key, err)
	}
	r, err := c.roundTrip(ctx, &request{op: opGet, key: key})
	if err != nil {
		return nil, opErr(opGet, key, err)
	}
	return r.value, nil
}

// Wait blocks until every key exists (has been set and not deleted since
// Wait was registered) or ctx ends. At most MaxWaitKeys keys.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	if err := checkKeys(keys); err != nil {
		return opErr(opWait, "", err)
	}
	if _, err := c.roundTrip(ctx, &request{op: opWait, keys: keys}); err != nil {
		return opErr(opWait, "", err)
	}
	return nil
}

// Check reports whether every key exists, without blocking.
func (c *Client) Check(ctx context.Context, keys ...string) (bool, error) {
	if err := checkKeys(keys); err != nil {
		return false, opErr(opCheck, "", err)
	}
	r, err := c.roundTrip(ctx, &request{op: opCheck, keys: keys})
	if err != nil {
		return false, opErr(opCheck, "", err)
	}
	return r.found, nil
}

// Add adds delta to the counter at key and returns the new total. A
// missing key counts as 0; the counter is stored as a decimal string, so
// Get returns it as text. Creating the key wakes its waiters.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, opErr(opAdd, key, err)
	}
	r, err := c.roundTrip(ctx, &request{op: opAdd, key: key, delta: delta})
	if err != nil {
		return 0, opErr(opAdd, key, err)
	}
	return r.n, nil
}

// Delete removes key and reports whether it existed.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, opErr(opDelete, key, err)
	}
	r, err := c.roundTrip(ctx, &request{op: opDelete, key: key})
	if err != nil {
		return false, opErr(opDelete, key, err)
	}
	return r.found, nil
}

// Ping makes one round trip to the server.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.roundTrip(ctx, &request{op: opPing}); err != nil {
		return opErr(opPing, "", err)
	}
	return nil
}

func checkKeys(keys []string) error {
	if len(keys) == 0 {
		return fmt.Errorf("bootstrap: %w: no keys", ErrInvalid)
	}
	if len(keys) > MaxWaitKeys {
		return fmt.Errorf("%w: %d keys (limit %d)", ErrTooLarge, len(keys), MaxWaitKeys)
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	return nil
}
