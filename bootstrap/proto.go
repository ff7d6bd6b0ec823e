package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/ibcoll/ibcoll/internal/errs"
)

// Wire format (all integers big-endian):
//
//	frame    = len:u32 payload              len = len(payload), checked before any allocation
//	payload  = version:u8 kind:u8 id:u64 body
//	key      = n:u16 bytes[n]               1 <= n <= MaxKeyLen
//	value    = n:u32 bytes[n]               n <= the server's MaxValueSize
//	keys     = count:u16 key*count          1 <= count <= MaxWaitKeys
//
// Requests (kind = op) and their bodies:
//
//	hello  token:(n:u16 bytes[n], n <= MaxTokenLen)   first frame of a connection
//	set    key value
//	get    key                                        blocks until the key exists
//	wait   keys                                       blocks until all keys exist
//	add    key delta:i64
//	delete key
//	check  keys
//	cancel target:u64                                 no response of its own
//	ping   (empty)
//
// Responses (kind = status) carry the id of their request:
//
//	ok       body by op: hello maxValue:u32 maxInflight:u32 idleMillis:u32;
//	         get value; add total:i64; delete, check found:u8 (0 or 1);
//	         set, wait, ping empty
//	error    code:u8 msg:(n:u16 bytes[n], n <= maxErrMsg)
//	canceled (empty)
//
// Every length is checked against what is left of the payload and against
// its limit, and trailing bytes are an error, so a payload has exactly one
// decoding and encoding a decoded message gives back the same bytes.

const (
	// ProtocolVersion is the first byte of every payload.
	ProtocolVersion = 1

	// MaxKeyLen is the longest key, in bytes. Keys are never empty.
	MaxKeyLen = 1024
	// MaxTokenLen is the longest shared token, in bytes.
	MaxTokenLen = 1024
	// MaxWaitKeys is the most keys one Wait or Check may name.
	MaxWaitKeys = 4096
	// DefaultMaxValueSize is the default limit on one value: 16 MiB.
	DefaultMaxValueSize = 16 << 20
	// MaxValueSizeLimit is the largest MaxValueSize a server accepts: 1 GiB.
	MaxValueSizeLimit = 1 << 30

	lenSize   = 4
	hdrSize   = 1 + 1 + 8
	maxErrMsg = 1024
	// Largest hello frame (request or response), read before the limits
	// of the connection are known.
	helloFrameMax = hdrSize + 1 + 2 + maxErrMsg + MaxTokenLen
	// Largest frame that is not a set request or a get response.
	smallFrameMax = hdrSize + 2 + MaxWaitKeys*(2+MaxKeyLen)
)

type op uint8

const (
	opHello op = 1 + iota
	opSet
	opGet
	opWait
	opAdd
	opDelete
	opCheck
	opCancel
	opPing
	// opWill leaves a key and value that the server sets if the connection
	// ends without the client taking it back (an empty value takes it back):
	// how the ranks learn that a process died.
	opWill
	opLast = opWill
)

var opNames = [...]string{
	opHello: "hello", opSet: "set", opGet: "get", opWait: "wait", opAdd: "add",
	opDelete: "delete", opCheck: "check", opCancel: "cancel", opPing: "ping",
	opWill: "will",
}

func (o op) String() string {
	if o >= 1 && o <= opLast {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

type status uint8

const (
	statusOK status = iota
	statusError
	statusCanceled
)

// errCode classifies an error response; the client maps it to a sentinel.
type errCode uint8

const (
	codeProtocol errCode = 1 + iota
	codeAuth
	codeTooLarge
	codeStoreFull
	codeNotInteger
	codeLast = codeNotInteger
)

var (
	// ErrProtocol means a peer broke the wire protocol: a malformed frame,
	// an unknown version, a limit of the connection exceeded.
	ErrProtocol = errors.New("bootstrap: protocol error")
	// ErrAuth means the server rejected the shared token.
	ErrAuth = errors.New("bootstrap: authentication failed")
	// ErrTooLarge means a key, value or request is over its limit.
	ErrTooLarge = errors.New("bootstrap: too large")
	// ErrStoreFull means the server holds its maximum of keys or bytes.
	ErrStoreFull = errors.New("bootstrap: store full")
	// ErrNotInteger means Add found a value that is not a decimal int64,
	// or the sum overflowed.
	ErrNotInteger = errors.New("bootstrap: value is not an integer")
	// ErrDisconnected means the connection to the store is gone (the
	// server closed, dropped the client, or the network failed). The
	// client cannot be used again.
	ErrDisconnected = errors.New("bootstrap: store connection lost")
	// ErrClosed means the client was closed (it is coll.ErrClosed, and
	// every other package's).
	ErrClosed = errs.ErrClosed
	// ErrInvalid means an argument is out of its domain (an empty key, a
	// rank outside the team); it is coll.ErrInvalid, and every other
	// package's.
	ErrInvalid = errs.ErrInvalid
)

func (c errCode) err() error {
	switch c {
	case codeAuth:
		return ErrAuth
	case codeTooLarge:
		return ErrTooLarge
	case codeStoreFull:
		return ErrStoreFull
	case codeNotInteger:
		return ErrNotInteger
	}
	return ErrProtocol
}

// limits are the sizes a connection accepts, derived from the server's
// MaxValueSize.
type limits struct {
	maxValue int
	maxFrame int // payload bytes of any frame
}

func newLimits(maxValue int) limits {
	return limits{
		maxValue: maxValue,
		maxFrame: max(smallFrameMax, hdrSize+2+MaxKeyLen+4+maxValue),
	}
}

type request struct {
	op     op
	id     uint64
	token  []byte   // hello
	key    string   // set, get, add, delete
	keys   []string // wait, check
	value  []byte   // set
	delta  int64    // add
	target uint64   // cancel
}

type response struct {
	status status
	id     uint64
	// status ok
	value       []byte // get
	n           int64  // add: the total
	found       bool   // delete, check
	maxValue    uint32 // hello
	maxInflight uint32 // hello
	idleMillis  uint32 // hello
	// status error
	code errCode
	msg  string
}

func (r *response) err() error {
	switch r.status {
	case statusError:
		return fmt.Errorf("%w: %s", r.code.err(), r.msg)
	case statusCanceled:
		return errCanceled
	}
	return nil
}

var errCanceled = errors.New("bootstrap: request canceled")

// readFrame reads one length-prefixed frame of at most max payload bytes.
// afterLen, when not nil, runs once the length has arrived (the server
// moves from its idle deadline to its frame deadline there). A payload
// that is announced but never sent costs no more memory than what
// actually arrived: large payloads are read in growing chunks.
func readFrame(r io.Reader, max int, afterLen func()) ([]byte, error) {
	var lb [lenSize]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(lb[:]))
	if n < hdrSize || n > max {
		return nil, fmt.Errorf("%w: frame of %d bytes (limit %d)", ErrProtocol, n, max)
	}
	if afterLen != nil {
		afterLen()
	}
	const chunk = 64 << 10
	if n <= chunk {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	b := make([]byte, 0, chunk)
	for len(b) < n {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), min(2*cap(b), n))
			copy(nb, b)
			b = nb
		}
		k, err := io.ReadFull(r, b[len(b):min(cap(b), n)])
		b = b[:len(b)+k]
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return b, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// decoder reads a payload; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("%s: %d bytes announced, %d left", what, n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8(what string) uint8 {
	if b := d.take(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16(what string) int {
	if b := d.take(2, what); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if b := d.take(4, what); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if b := d.take(8, what); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) key() string {
	n := d.u16("key length")
	if d.err == nil && (n == 0 || n > MaxKeyLen) {
		d.fail("key of %d bytes (1 to %d)", n, MaxKeyLen)
	}
	return string(d.take(n, "key"))
}

func (d *decoder) keys() []string {
	n := d.u16("key count")
	if d.err == nil && (n == 0 || n > MaxWaitKeys) {
		d.fail("%d keys (1 to %d)", n, MaxWaitKeys)
	}
	if d.err != nil {
		return nil
	}
	// Each key takes at least 3 bytes: no count can allocate more than
	// the payload justifies.
	if n > len(d.b)/3 {
		d.fail("%d keys in %d bytes", n, len(d.b))
		return nil
	}
	ks := make([]string, n)
	for i := range ks {
		ks[i] = d.key()
	}
	return ks
}

func (d *decoder) value(max int) []byte {
	n := d.u32("value length")
	if d.err == nil && uint64(n) > uint64(max) {
		d.fail("value of %d bytes (limit %d)", n, max)
		return nil
	}
	return d.take(int(n), "value")
}

func (d *decoder) bool(what string) bool {
	v := d.u8(what)
	if d.err == nil && v > 1 {
		d.fail("%s: %d is not a bool", what, v)
	}
	return v == 1
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// header decodes version, kind and id.
func (d *decoder) header() (kind uint8, id uint64) {
	v := d.u8("version")
	kind = d.u8("kind")
	id = d.u64("id")
	if d.err == nil && v != ProtocolVersion {
		d.fail("version %d (want %d)", v, ProtocolVersion)
	}
	return kind, id
}

// decodeRequest parses a request payload. It never panics and allocates
// no more than a small multiple of len(p).
func decodeRequest(p []byte, lim limits) (request, error) {
	d := decoder{b: p}
	kind, id := d.header()
	r := request{op: op(kind), id: id}
	if d.err != nil {
		return r, d.err
	}
	switch r.op {
	case opHello:
		n := d.u16("token length")
		if d.err == nil && n > MaxTokenLen {
			d.fail("token of %d bytes (limit %d)", n, MaxTokenLen)
		}
		r.token = d.take(n, "token")
	case opSet, opWill:
		r.key = d.key()
		r.value = d.value(lim.maxValue)
	case opGet, opDelete:
		r.key = d.key()
	case opWait, opCheck:
		r.keys = d.keys()
	case opAdd:
		r.key = d.key()
		r.delta = int64(d.u64("delta"))
	case opCancel:
		r.target = d.u64("target")
	case opPing:
	default:
		d.fail("unknown op %d", kind)
	}
	return r, d.end()
}

// decodeResponse parses a response payload to a request of op o.
func decodeResponse(p []byte, o op, lim limits) (response, error) {
	d := decoder{b: p}
	kind, id := d.header()
	r := response{status: status(kind), id: id}
	if d.err != nil {
		return r, d.err
	}
	switch r.status {
	case statusOK:
		switch o {
		case opHello:
			r.maxValue = d.u32("max value")
			r.maxInflight = d.u32("max inflight")
			r.idleMillis = d.u32("idle timeout")
		case opGet:
			r.value = d.value(lim.maxValue)
		case opAdd:
			r.n = int64(d.u64("total"))
		case opDelete, opCheck:
			r.found = d.bool("found")
		case opSet, opWait, opPing, opWill:
		default:
			d.fail("response to %v", o)
		}
	case statusError:
		r.code = errCode(d.u8("error code"))
		if d.err == nil && (r.code == 0 || r.code > codeLast) {
			d.fail("unknown error code %d", r.code)
		}
		n := d.u16("message length")
		if d.err == nil && n > maxErrMsg {
			d.fail("error message of %d bytes (limit %d)", n, maxErrMsg)
		}
		r.msg = string(d.take(n, "message"))
	case statusCanceled:
	default:
		d.fail("unknown status %d", kind)
	}
	return r, d.end()
}

// encoder builds a frame: the length prefix, the payload up to a trailing
// value, and that value apart, so that large values are written from the
// caller's slice with one writev and never copied.
type encoder struct {
	b    []byte
	tail []byte
}

func newEncoder(kind uint8, id uint64, size int) *encoder {
	e := &encoder{b: make([]byte, lenSize, lenSize+hdrSize+size)}
	e.b = append(e.b, ProtocolVersion, kind)
	e.b = binary.BigEndian.AppendUint64(e.b, id)
	return e
}

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v int)    { e.b = binary.BigEndian.AppendUint16(e.b, uint16(v)) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string) { e.u16(len(s)); e.b = append(e.b, s...) }
func (e *encoder) keys(ks []string) {
	e.u16(len(ks))
	for _, k := range ks {
		e.str(k)
	}
}

// value appends a value; it must be the last field.
func (e *encoder) value(v []byte) {
	e.u32(uint32(len(v)))
	e.tail = v
}

func (e *encoder) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// frame fills in the length prefix and returns the frame as head and tail.
func (e *encoder) frame() (head, tail []byte) {
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-lenSize+len(e.tail)))
	return e.b, e.tail
}

// payloadLen is the payload size of the frame.
func (e *encoder) payloadLen() int { return len(e.b) - lenSize + len(e.tail) }

// encodeRequest encodes r. It does not check limits: callers check key
// lengths and payloadLen against the connection's limits.
func encodeRequest(r *request) *encoder {
	e := newEncoder(uint8(r.op), r.id, 2+len(r.key)+8)
	switch r.op {
	case opHello:
		e.str(string(r.token))
	case opSet, opWill:
		e.str(r.key)
		e.value(r.value)
	case opGet, opDelete:
		e.str(r.key)
	case opWait, opCheck:
		e.keys(r.keys)
	case opAdd:
		e.str(r.key)
		e.u64(uint64(r.delta))
	case opCancel:
		e.u64(r.target)
	}
	return e
}

// encodeResponse encodes the response r to a request of op o.
func encodeResponse(r *response, o op) *encoder {
	e := newEncoder(uint8(r.status), r.id, 16)
	switch r.status {
	case statusOK:
		switch o {
		case opHello:
			e.u32(r.maxValue)
			e.u32(r.maxInflight)
			e.u32(r.idleMillis)
		case opGet:
			e.value(r.value)
		case opAdd:
			e.u64(uint64(r.n))
		case opDelete, opCheck:
			e.bool(r.found)
		}
	case statusError:
		msg := r.msg
		if len(msg) > maxErrMsg {
			msg = msg[:maxErrMsg]
		}
		e.u8(uint8(r.code))
		e.str(msg)
	}
	return e
}

// checkKey reports a key the protocol cannot carry.
func checkKey(k string) error {
	if len(k) == 0 {
		return fmt.Errorf("bootstrap: %w: empty key", ErrInvalid)
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes (limit %d)", ErrTooLarge, len(k), MaxKeyLen)
	}
	return nil
}
