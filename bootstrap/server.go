package bootstrap

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// TokenEnv names the environment variable holding the shared token that
// servers and clients use when their options leave Token empty.
const TokenEnv = "IBCOLL_STORE_TOKEN"

// Defaults of ServerOptions.
const (
	DefaultMaxKeys          = 1 << 20
	DefaultMaxBytes         = 4 << 30
	DefaultMaxConns         = 4096
	DefaultMaxInflight      = 1024
	DefaultMaxWaiting       = 1 << 20
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultReadTimeout      = 30 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
)

// ServerOptions configures a Server. The zero value gives the defaults.
type ServerOptions struct {
	// Token is the shared secret that clients must present. Empty means
	// $IBCOLL_STORE_TOKEN; empty there too, any client is accepted.
	Token string
	// MaxValueSize limits one value (DefaultMaxValueSize; at most
	// MaxValueSizeLimit).
	MaxValueSize int
	// MaxKeys limits the number of keys held (DefaultMaxKeys).
	MaxKeys int
	// MaxBytes limits the bytes of all keys and values held
	// (DefaultMaxBytes); negative means no limit.
	MaxBytes int64
	// MaxWaiting limits the keys that blocked Gets and Waits wait for,
	// over all connections (DefaultMaxWaiting); a Wait beyond it fails
	// with ErrStoreFull. Allgather and Barrier wait for one key per rank.
	MaxWaiting int
	// MaxConns limits open connections (DefaultMaxConns); more are
	// accepted and closed at once.
	MaxConns int
	// MaxInflight limits the requests of one connection that are not
	// answered yet, blocked Get and Wait included (DefaultMaxInflight;
	// at least 2). Clients learn it at the handshake and stay under it,
	// keeping one for their keepalive; a connection that goes over is
	// dropped.
	MaxInflight int
	// HandshakeTimeout bounds the time from accept to a valid hello.
	HandshakeTimeout time.Duration
	// IdleTimeout bounds the gap between two frames of a connection
	// (DefaultIdleTimeout); negative means none. Clients learn it at the
	// handshake and ping often enough, even while blocked in Get.
	IdleTimeout time.Duration
	// ReadTimeout bounds the time to receive a frame once its length
	// has arrived (DefaultReadTimeout): a peer stalling mid-message.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response (DefaultWriteTimeout): a
	// peer that stops reading.
	WriteTimeout time.Duration
	// Logf, when set, reports dropped connections and why.
	Logf func(format string, args ...any)
}

func (o ServerOptions) withDefaults() (ServerOptions, error) {
	if len(o.Token) > MaxTokenLen {
		return o, fmt.Errorf("%w: token of %d bytes (limit %d)", ErrTooLarge, len(o.Token), MaxTokenLen)
	}
	if o.MaxValueSize > MaxValueSizeLimit {
		return o, fmt.Errorf("bootstrap: %w: MaxValueSize %d (limit %d)", ErrInvalid, o.MaxValueSize, MaxValueSizeLimit)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxValueSize, DefaultMaxValueSize)
	def(&o.MaxKeys, DefaultMaxKeys)
	def(&o.MaxWaiting, DefaultMaxWaiting)
	def(&o.MaxConns, DefaultMaxConns)
	def(&o.MaxInflight, DefaultMaxInflight)
	o.MaxInflight = max(o.MaxInflight, 2) // one is the client's keepalive
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	dur(&o.HandshakeTimeout, DefaultHandshakeTimeout)
	dur(&o.IdleTimeout, DefaultIdleTimeout)
	dur(&o.ReadTimeout, DefaultReadTimeout)
	dur(&o.WriteTimeout, DefaultWriteTimeout)
	return o, nil
}

// Server is a rendezvous store: keys to byte values, with blocking Get and
// Wait and atomic counters. It serves any number of clients until Close.
type Server struct {
	opts  ServerOptions
	token []byte // sha256 of the token; nil when none is required
	lim   limits
	ln    net.Listener

	mu    sync.Mutex // the store and all waiters
	data  map[string][]byte
	bytes int64
	// willBytes: the keys and values of every connection's wills, which count
	// against MaxBytes with the data's
	willBytes int64
	waiters   map[string]map[*waiter]struct{}
	waiting   int // entries in all sets of waiters

	cmu    sync.Mutex
	conns  map[*sconn]struct{}
	closed bool
	// left is closed and replaced each time a connection ends, so that
	// Drain can wait for the last one without polling; guarded by cmu.
	left chan struct{}
	wg   sync.WaitGroup
}

// waiter is a blocked Get or Wait. All its fields are guarded by Server.mu.
type waiter struct {
	c       *sconn
	id      uint64
	op      op
	keys    []string // the keys it was registered on
	missing int
}

// NewServer listens on addr (host:port; port 0 picks one, see Addr) and
// serves until Close.
func NewServer(addr string, opts ServerOptions) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: listen: %w", err)
	}
	s := &Server{
		opts:    opts,
		lim:     newLimits(opts.MaxValueSize),
		ln:      ln,
		data:    make(map[string][]byte),
		waiters: make(map[string]map[*waiter]struct{}),
		conns:   make(map[*sconn]struct{}),
		left:    make(chan struct{}),
	}
	if opts.Token != "" {
		h := sha256.Sum256([]byte(opts.Token))
		s.token = h[:]
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops accepting, drops every connection (their blocked clients
// fail with ErrDisconnected) and waits for all of the server's goroutines.
// It is idempotent and nil-safe.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.cmu.Lock()
	if s.closed {
		s.cmu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.kill()
	}
	s.cmu.Unlock()
	s.wg.Wait()
	return err
}

// Drain keeps serving until every client has disconnected, or ctx ends
// (then it returns ctx's error, naming how many are still connected). A
// process that serves the store and fails calls it before Close: the
// others then learn of the failure from the store itself (a will, a key),
// not from losing the store, which would only say that the server's
// process went away. It does not stop new connections; nil-safe.
func (s *Server) Drain(ctx context.Context) error {
	if s == nil {
		return nil
	}
	for {
		s.cmu.Lock()
		n, left := len(s.conns), s.left
		s.cmu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-left:
		case <-ctx.Done():
			return fmt.Errorf("bootstrap: drain: %d client(s) still connected: %w", n, ctx.Err())
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait, the store may
			// recover as clients leave.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logf("bootstrap: accept: %v", err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.cmu.Lock()
		if s.closed || len(s.conns) >= s.opts.MaxConns {
			full := !s.closed
			s.cmu.Unlock()
			if full {
				s.logf("bootstrap: %v: dropped: %d connections open", nc.RemoteAddr(), s.opts.MaxConns)
			}
			nc.Close()
			continue
		}
		c := &sconn{
			s:       s,
			nc:      nc,
			out:     make(chan outMsg, s.opts.MaxInflight+2),
			done:    make(chan struct{}),
			wrDone:  make(chan struct{}),
			waiters: make(map[uint64]*waiter),
		}
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.cmu.Unlock()
		go c.writeLoop()
		go c.readLoop()
	}
}

// sconn is the server side of one connection: a reader goroutine that
// decodes and handles requests, a writer goroutine that sends responses.
type sconn struct {
	s  *Server
	nc net.Conn
	// out holds encoded responses. Every response answers one counted
	// request and at most MaxInflight requests are counted at a time
	// (plus the hello and the final error of a violation), so a send
	// never blocks.
	out      chan outMsg
	inflight atomic.Int32
	done     chan struct{}
	wrDone   chan struct{}
	killOnce sync.Once
	waiters  map[uint64]*waiter // by request id; guarded by Server.mu
	// wills are set when the connection ends, unless the server is closing;
	// guarded by Server.mu, at most MaxWills.
	wills map[string][]byte
}

type outMsg struct {
	head, tail []byte
	counted    bool // answers a request counted in inflight
	last       bool // close the connection once written
}

func (c *sconn) kill() {
	c.killOnce.Do(func() {
		close(c.done)
		c.nc.Close()
	})
}

func (c *sconn) push(m outMsg) {
	select {
	case <-c.done:
		return // dropped: nobody will write it
	case c.out <- m:
	default:
		// Unreachable while the inflight accounting holds; dropping the
		// connection is the safe way out.
		c.s.logf("bootstrap: %v: response queue full", c.nc.RemoteAddr())
		c.kill()
	}
}

func (c *sconn) respond(r *response, o op) {
	head, tail := encodeResponse(r, o).frame()
	c.push(outMsg{head: head, tail: tail, counted: true})
}

func (c *sconn) respondErr(id uint64, o op, code errCode, err error) {
	c.respond(&response{status: statusError, id: id, code: code, msg: err.Error()}, o)
}

// fatal sends a last error response and drops the connection once it is
// written (or WriteTimeout passed).
func (c *sconn) fatal(id uint64, code errCode, err error, counted bool) {
	c.s.logf("bootstrap: %v: dropped: %v", c.nc.RemoteAddr(), err)
	r := response{status: statusError, id: id, code: code, msg: err.Error()}
	head, tail := encodeResponse(&r, opPing).frame()
	c.push(outMsg{head: head, tail: tail, counted: counted, last: true})
	select {
	case <-c.wrDone:
	case <-c.done:
	}
}

func (c *sconn) writeLoop() {
	defer c.s.wg.Done()
	defer close(c.wrDone)
	defer c.kill()
	for {
		select {
		case m := <-c.out:
			// Count the response out before writing it: the client may
			// send its next request as soon as this one arrives.
			if m.counted {
				c.inflight.Add(-1)
			}
			if t := c.s.opts.WriteTimeout; t > 0 {
				c.nc.SetWriteDeadline(time.Now().Add(t))
			}
			bufs := net.Buffers{m.head, m.tail}
			if _, err := bufs.WriteTo(c.nc); err != nil {
				c.s.logf("bootstrap: %v: dropped: write: %v", c.nc.RemoteAddr(), err)
				return
			}
			if m.last {
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *sconn) readLoop() {
	s := c.s
	defer s.wg.Done()
	defer func() {
		c.kill()
		s.fireWills(c)
		s.dropWaiters(c)
		s.cmu.Lock()
		delete(s.conns, c)
		close(s.left)
		s.left = make(chan struct{})
		s.cmu.Unlock()
	}()
	br := bufio.NewReaderSize(c.nc, 8<<10)
	if !c.handshake(br) {
		return
	}
	bodyDeadline := func() {
		if t := s.opts.ReadTimeout; t > 0 {
			c.nc.SetReadDeadline(time.Now().Add(t))
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
	}
	for {
		if t := s.opts.IdleTimeout; t > 0 {
			c.nc.SetReadDeadline(time.Now().Add(t))
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
		p, err := readFrame(br, s.lim.maxFrame, bodyDeadline)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				c.fatal(0, codeProtocol, err, false)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.logf("bootstrap: %v: dropped: read: %v", c.nc.RemoteAddr(), err)
			}
			return
		}
		req, err := decodeRequest(p, s.lim)
		if err != nil {
			c.fatal(req.id, codeProtocol, err, false)
			return
		}
		if req.op == opCancel {
			s.cancel(c, req.target)
			continue
		}
		if int(c.inflight.Add(1)) > s.opts.MaxInflight {
			c.fatal(req.id, codeProtocol, fmt.Errorf("%w: more than %d requests in flight", ErrProtocol, s.opts.MaxInflight), true)
			return
		}
		if !s.handle(c, &req) {
			return
		}
	}
}

func (c *sconn) handshake(br *bufio.Reader) bool {
	s := c.s
	if t := s.opts.HandshakeTimeout; t > 0 {
		c.nc.SetReadDeadline(time.Now().Add(t))
	}
	p, err := readFrame(br, helloFrameMax, nil)
	if err != nil {
		if errors.Is(err, ErrProtocol) {
			c.fatal(0, codeProtocol, err, false)
		} else {
			s.logf("bootstrap: %v: closed before hello: %v", c.nc.RemoteAddr(), err)
		}
		return false
	}
	req, err := decodeRequest(p, s.lim)
	if err == nil && req.op != opHello {
		err = fmt.Errorf("%w: %v before hello", ErrProtocol, req.op)
	}
	if err != nil {
		c.fatal(req.id, codeProtocol, err, false)
		return false
	}
	if s.token != nil {
		h := sha256.Sum256(req.token)
		if subtle.ConstantTimeCompare(h[:], s.token) != 1 {
			c.fatal(req.id, codeAuth, errors.New("wrong token"), false)
			return false
		}
	}
	idle := s.opts.IdleTimeout.Milliseconds()
	if idle < 0 {
		idle = 0
	}
	r := response{
		id:          req.id,
		maxValue:    uint32(s.opts.MaxValueSize),
		maxInflight: uint32(s.opts.MaxInflight),
		idleMillis:  uint32(min(idle, 1<<32-1)),
	}
	head, tail := encodeResponse(&r, opHello).frame()
	c.push(outMsg{head: head, tail: tail})
	return true
}

// handle serves one counted request; false drops the connection.
func (s *Server) handle(c *sconn, req *request) bool {
	switch req.op {
	case opSet:
		if err := s.set(req.key, req.value); err != nil {
			c.respondErr(req.id, req.op, codeStoreFull, err)
		} else {
			c.respond(&response{id: req.id}, req.op)
		}
	case opGet:
		return s.wait(c, req.id, opGet, []string{req.key})
	case opWait:
		return s.wait(c, req.id, opWait, req.keys)
	case opAdd:
		n, code, err := s.add(req.key, req.delta)
		if err != nil {
			c.respondErr(req.id, req.op, code, err)
		} else {
			c.respond(&response{id: req.id, n: n}, req.op)
		}
	case opDelete:
		s.mu.Lock()
		v, ok := s.data[req.key]
		if ok {
			delete(s.data, req.key)
			s.bytes -= int64(len(req.key) + len(v))
		}
		s.mu.Unlock()
		c.respond(&response{id: req.id, found: ok}, req.op)
	case opCheck:
		s.mu.Lock()
		all := true
		for _, k := range req.keys {
			if _, ok := s.data[k]; !ok {
				all = false
				break
			}
		}
		s.mu.Unlock()
		c.respond(&response{id: req.id, found: all}, req.op)
	case opPing:
		c.respond(&response{id: req.id}, req.op)
	case opWill:
		if err := s.will(c, req.key, req.value); err != nil {
			c.respondErr(req.id, req.op, codeStoreFull, err)
		} else {
			c.respond(&response{id: req.id}, req.op)
		}
	default:
		c.fatal(req.id, codeProtocol, fmt.Errorf("%w: %v after hello", ErrProtocol, req.op), true)
		return false
	}
	return true
}

type wake struct {
	w   *waiter
	val []byte
}

// storeLocked puts key=val within the limits and collects the waiters that
// the new key completes.
func (s *Server) storeLocked(key string, val []byte, wakes []wake) ([]wake, error) {
	old, had := s.data[key]
	size := s.bytes + int64(len(val))
	held := s.willBytes
	if had {
		size -= int64(len(old))
	} else {
		if len(s.data) >= s.opts.MaxKeys {
			return wakes, fmt.Errorf("%w: %d keys", ErrStoreFull, len(s.data))
		}
		size += int64(len(key))
	}
	if s.opts.MaxBytes > 0 && size+held > s.opts.MaxBytes {
		return wakes, fmt.Errorf("%w: %d bytes, %d of them in wills (limit %d)", ErrStoreFull, size+held, held, s.opts.MaxBytes)
	}
	s.data[key] = val
	s.bytes = size
	if had {
		return wakes, nil
	}
	for w := range s.waiters[key] {
		s.waiting--
		w.missing--
		if w.missing == 0 {
			delete(w.c.waiters, w.id)
			wakes = append(wakes, wake{w, val})
		}
	}
	delete(s.waiters, key)
	return wakes, nil
}

// wakeAll answers completed waiters, outside the lock.
func wakeAll(wakes []wake) {
	for _, k := range wakes {
		r := response{id: k.w.id}
		if k.w.op == opGet {
			r.value = k.val
		}
		k.w.c.respond(&r, k.w.op)
	}
}

func (s *Server) set(key string, val []byte) error {
	s.mu.Lock()
	wakes, err := s.storeLocked(key, val, nil)
	s.mu.Unlock()
	wakeAll(wakes)
	return err
}

func (s *Server) add(key string, delta int64) (int64, errCode, error) {
	s.mu.Lock()
	var cur int64
	if old, ok := s.data[key]; ok {
		v, err := strconv.ParseInt(string(old), 10, 64)
		if err != nil {
			s.mu.Unlock()
			return 0, codeNotInteger, fmt.Errorf("%w: %q holds %d bytes that are not a decimal int64", ErrNotInteger, key, len(old))
		}
		cur = v
	}
	n := cur + delta
	if (delta > 0 && n < cur) || (delta < 0 && n > cur) {
		s.mu.Unlock()
		return 0, codeNotInteger, fmt.Errorf("%w: %d + %d overflows", ErrNotInteger, cur, delta)
	}
	wakes, err := s.storeLocked(key, strconv.AppendInt(nil, n, 10), nil)
	s.mu.Unlock()
	wakeAll(wakes)
	if err != nil {
		return 0, codeStoreFull, err
	}
	return n, 0, nil
}

// wait answers a Get or Wait at once when all keys exist, or registers a
// waiter that a later set answers. Nothing blocks here.
func (s *Server) wait(c *sconn, id uint64, o op, keys []string) bool {
	s.mu.Lock()
	if _, dup := c.waiters[id]; dup {
		s.mu.Unlock()
		c.fatal(id, codeProtocol, fmt.Errorf("%w: request id %d already waiting", ErrProtocol, id), true)
		return false
	}
	w := &waiter{c: c, id: id, op: o}
	var seen map[string]bool // keys named twice are waited for once
	if len(keys) > 8 {
		seen = make(map[string]bool, len(keys))
	}
	for _, k := range keys {
		if _, ok := s.data[k]; ok {
			continue
		}
		if seen != nil {
			if seen[k] {
				continue
			}
			seen[k] = true
		} else if slices.Contains(w.keys, k) {
			continue
		}
		w.keys = append(w.keys, k)
	}
	if n := s.waiting + len(w.keys); len(w.keys) > 0 && n > s.opts.MaxWaiting {
		s.mu.Unlock()
		c.respondErr(id, o, codeStoreFull, fmt.Errorf("%w: %d keys waited for (limit %d)", ErrStoreFull, n, s.opts.MaxWaiting))
		return true
	}
	for _, k := range w.keys {
		set := s.waiters[k]
		if set == nil {
			set = make(map[*waiter]struct{})
			s.waiters[k] = set
		}
		set[w] = struct{}{}
		s.waiting++
		w.missing++
	}
	if w.missing > 0 {
		c.waiters[id] = w
		s.mu.Unlock()
		return true
	}
	var val []byte
	if o == opGet {
		val = s.data[keys[0]]
	}
	s.mu.Unlock()
	wakeAll([]wake{{w, val}})
	return true
}

func (s *Server) unregisterLocked(w *waiter) {
	for _, k := range w.keys {
		if _, ok := s.waiters[k][w]; ok {
			set := s.waiters[k]
			delete(set, w)
			s.waiting--
			if len(set) == 0 {
				delete(s.waiters, k)
			}
		}
	}
	delete(w.c.waiters, w.id)
}

func (s *Server) cancel(c *sconn, id uint64) {
	s.mu.Lock()
	w := c.waiters[id]
	if w != nil {
		s.unregisterLocked(w)
	}
	s.mu.Unlock()
	if w != nil {
		c.respond(&response{status: statusCanceled, id: id}, w.op)
	}
}

func (s *Server) dropWaiters(c *sconn) {
	s.mu.Lock()
	for _, w := range c.waiters {
		s.unregisterLocked(w)
	}
	s.mu.Unlock()
}

// stats reports the keys, bytes and waited-for keys held; tests use it to
// see that disconnects clean up. It recounts what the server tracks, and
// reports -1 waiting when the two disagree.
func (s *Server) stats() (keys int, bytes int64, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range s.waiters {
		waiting += len(set)
	}
	var n int64
	for k, v := range s.data {
		n += int64(len(k) + len(v))
	}
	if waiting != s.waiting || n != s.bytes {
		return len(s.data), s.bytes, -1
	}
	return len(s.data), s.bytes, waiting
}

// MaxWills bounds the wills one connection may leave.
const MaxWills = 64

// will records (or, for an empty value, withdraws) c's will for key. A will's key
// and value count against MaxBytes, with the data's, until it is withdrawn or set.
func (s *Server) will(c *sconn, key string, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := c.wills[key]
	if len(val) == 0 {
		if had {
			delete(c.wills, key)
			s.willBytes -= willSize(key, old)
		}
		return nil
	}
	if !had && len(c.wills) >= MaxWills {
		return fmt.Errorf("%w: more than %d wills on one connection", ErrStoreFull, MaxWills)
	}
	held := s.willBytes + willSize(key, val)
	if had {
		held -= willSize(key, old)
	}
	if s.opts.MaxBytes > 0 && s.bytes+held > s.opts.MaxBytes {
		return fmt.Errorf("%w: a will of %d bytes, %d bytes held, %d in wills (limit %d)", ErrStoreFull, len(val), s.bytes+held, held, s.opts.MaxBytes)
	}
	if c.wills == nil {
		c.wills = map[string][]byte{}
	}
	c.wills[key] = append([]byte(nil), val...)
	s.willBytes = held
	return nil
}

func willSize(key string, val []byte) int64 { return int64(len(key) + len(val)) }

// fireWills sets the wills of a connection that ended, so that the clients
// waiting for those keys learn of it, unless the server itself is closing
// (then every client sees its own connection drop). A full store drops a
// will: it is logged, and the waiters still have their deadlines.
func (s *Server) fireWills(c *sconn) {
	s.cmu.Lock()
	closing := s.closed
	s.cmu.Unlock()
	s.mu.Lock()
	wills := c.wills
	c.wills = nil
	for k, v := range wills {
		s.willBytes -= willSize(k, v)
	}
	s.mu.Unlock()
	if closing {
		return
	}
	for k, v := range wills {
		if err := s.set(k, v); err != nil {
			s.logf("bootstrap: %v: will %q not set: %v", c.nc.RemoteAddr(), k, err)
		}
	}
}
