package bootstrap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func frameBytes(e *encoder) []byte {
	head, tail := e.frame()
	return append(append([]byte{}, head...), tail...)
}

var sampleRequests = []request{
	{op: opHello, id: 0},
	{op: opHello, id: 7, token: []byte("s3cret")},
	{op: opSet, id: 1, key: "k", value: []byte("hello")},
	{op: opSet, id: 2, key: strings.Repeat("x", MaxKeyLen), value: []byte{}},
	{op: opGet, id: 3, key: "ibcoll/ag/t/0/1"},
	{op: opWait, id: 4, keys: []string{"a", "b", "a"}},
	{op: opCheck, id: 5, keys: []string{"z"}},
	{op: opAdd, id: 6, key: "n", delta: -42},
	{op: opDelete, id: 1 << 63, key: "n"},
	{op: opCancel, id: 9, target: 3},
	{op: opPing, id: 10},
}

type sampleResponse struct {
	o op
	r response
}

var sampleResponses = []sampleResponse{
	{opHello, response{maxValue: 1 << 24, maxInflight: 1024, idleMillis: 120000}},
	{opSet, response{id: 1}},
	{opGet, response{id: 3, value: []byte("value")}},
	{opGet, response{id: 3, value: []byte{}}},
	{opWait, response{id: 4}},
	{opCheck, response{id: 5, found: true}},
	{opDelete, response{id: 5, found: false}},
	{opAdd, response{id: 6, n: -1 << 63}},
	{opPing, response{id: 10}},
	{opGet, response{status: statusError, id: 11, code: codeStoreFull, msg: "store full"}},
	{opGet, response{status: statusCanceled, id: 12}},
}

func TestRequestRoundTrip(t *testing.T) {
	lim := newLimits(DefaultMaxValueSize)
	for _, want := range sampleRequests {
		t.Run(want.op.String(), func(t *testing.T) {
			p, err := readFrame(bytes.NewReader(frameBytes(encodeRequest(&want))), lim.maxFrame, nil)
			require.NoError(t, err)
			got, err := decodeRequest(p, lim)
			require.NoError(t, err)
			normalize := func(r *request) {
				if len(r.token) == 0 {
					r.token = nil
				}
				if len(r.value) == 0 && r.op == opSet {
					r.value = []byte{}
				}
			}
			normalize(&want)
			normalize(&got)
			require.Equal(t, want, got)
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	lim := newLimits(DefaultMaxValueSize)
	for _, s := range sampleResponses {
		t.Run(s.o.String(), func(t *testing.T) {
			p, err := readFrame(bytes.NewReader(frameBytes(encodeResponse(&s.r, s.o))), lim.maxFrame, nil)
			require.NoError(t, err)
			got, err := decodeResponse(p, s.o, lim)
			require.NoError(t, err)
			require.Equal(t, s.r, got)
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	lim := newLimits(64)
	hdr := func(v, kind uint8) []byte {
		return binary.BigEndian.AppendUint64([]byte{v, kind}, 1)
	}
	u16 := func(b []byte, v int) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
	u32 := func(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
	key := func(b []byte, k string) []byte { return append(u16(b, len(k)), k...) }
	cases := []struct {
		name string
		p    []byte
		want string
	}{
		{"empty", nil, "version"},
		{"short header", []byte{ProtocolVersion, byte(opPing), 0, 0}, "id"},
		{"version 0", hdr(0, byte(opPing)), "version 0"},
		{"version 2", hdr(2, byte(opPing)), "version 2"},
		{"op 0", hdr(ProtocolVersion, 0), "unknown op 0"},
		{"op 200", hdr(ProtocolVersion, 200), "unknown op 200"},
		{"ping trailing", append(hdr(ProtocolVersion, byte(opPing)), 0), "trailing"},
		{"empty key", key(hdr(ProtocolVersion, byte(opGet)), ""), "key of 0 bytes"},
		{"long key", key(hdr(ProtocolVersion, byte(opGet)), strings.Repeat("k", MaxKeyLen+1)), "key of 1025"},
		{"key cut", u16(hdr(ProtocolVersion, byte(opGet)), 5), "key: 5 bytes announced, 0 left"},
		{"value over limit", u32(key(hdr(ProtocolVersion, byte(opSet)), "k"), 65), "value of 65 bytes (limit 64)"},
		{"value 4 GiB", u32(key(hdr(ProtocolVersion, byte(opSet)), "k"), 1<<32-1), "limit 64"},
		{"value cut", append(u32(key(hdr(ProtocolVersion, byte(opSet)), "k"), 8), 1, 2), "value: 8 bytes announced, 2 left"},
		{"set without value", key(hdr(ProtocolVersion, byte(opSet)), "k"), "value length"},
		{"wait no keys", u16(hdr(ProtocolVersion, byte(opWait)), 0), "0 keys"},
		{"wait too many keys", u16(hdr(ProtocolVersion, byte(opWait)), MaxWaitKeys+1), "4097 keys"},
		{"wait count beyond payload", key(u16(hdr(ProtocolVersion, byte(opWait)), 4000), "k"), "4000 keys in 3 bytes"},
		{"add short", append(key(hdr(ProtocolVersion, byte(opAdd)), "k"), 1, 2, 3), "delta"},
		{"token too long", u16(hdr(ProtocolVersion, byte(opHello)), MaxTokenLen+1), "token of 1025"},
		{"cancel short", append(hdr(ProtocolVersion, byte(opCancel)), 1), "target"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeRequest(c.p, lim)
			require.ErrorIs(t, err, ErrProtocol)
			require.ErrorContains(t, err, c.want)
		})
	}

	t.Run("responses", func(t *testing.T) {
		for _, c := range []struct {
			name string
			o    op
			p    []byte
			want string
		}{
			{"status 9", opPing, hdr(ProtocolVersion, 9), "unknown status 9"},
			{"error code 0", opPing, u16(append(hdr(ProtocolVersion, byte(statusError)), 0), 0), "unknown error code 0"},
			{"error code 99", opPing, u16(append(hdr(ProtocolVersion, byte(statusError)), 99), 0), "unknown error code 99"},
			{"long message", opPing, u16(append(hdr(ProtocolVersion, byte(statusError)), 1), maxErrMsg+1), "message of 1025"},
			{"bool 2", opCheck, append(hdr(ProtocolVersion, byte(statusOK)), 2), "not a bool"},
			{"get value over limit", opGet, u32(hdr(ProtocolVersion, byte(statusOK)), 65), "limit 64"},
			{"ok to cancel", opCancel, hdr(ProtocolVersion, byte(statusOK)), "response to cancel"},
			{"hello short", opHello, u32(hdr(ProtocolVersion, byte(statusOK)), 1), "max inflight"},
		} {
			_, err := decodeResponse(c.p, c.o, lim)
			require.ErrorIs(t, err, ErrProtocol, c.name)
			require.ErrorContains(t, err, c.want, c.name)
		}
	})
}

// TestDecodeAtLimits: the protocol's limits are inclusive: a wait of MaxWaitKeys keys,
// a token of MaxTokenLen bytes and an error message of maxErrMsg bytes decode; an
// error message longer than that is cut to maxErrMsg bytes when encoded, so that the
// client still reads the error rather than a protocol failure.
func TestDecodeAtLimits(t *testing.T) {
	lim := newLimits(DefaultMaxValueSize)
	keys := make([]string, MaxWaitKeys)
	for i := range keys {
		keys[i] = strings.Repeat("k", 1+i%7)
	}
	for _, want := range []request{
		{op: opWait, id: 1, keys: keys},
		{op: opHello, id: 2, token: bytes.Repeat([]byte("t"), MaxTokenLen)},
	} {
		got, err := decodeRequest(frameBytes(encodeRequest(&want))[lenSize:], lim)
		require.NoError(t, err, "%v", want.op)
		require.Equal(t, want, got)
	}
	for _, c := range []struct{ msg, want string }{
		{strings.Repeat("m", maxErrMsg), strings.Repeat("m", maxErrMsg)},
		{strings.Repeat("n", maxErrMsg) + "cut", strings.Repeat("n", maxErrMsg)},
	} {
		r := response{status: statusError, id: 3, code: codeTooLarge, msg: c.msg}
		got, err := decodeResponse(frameBytes(encodeResponse(&r, opSet))[lenSize:], opSet, lim)
		require.NoError(t, err, "message of %d bytes", len(c.msg))
		require.Equal(t, c.want, got.msg)
		require.ErrorIs(t, got.err(), ErrTooLarge)
	}
}

func TestReadFrameLimits(t *testing.T) {
	lenOnly := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

	_, err := readFrame(bytes.NewReader(lenOnly(1<<32-1)), 1<<20, nil)
	require.ErrorIs(t, err, ErrProtocol)
	require.ErrorContains(t, err, "frame of 4294967295 bytes")
	_, err = readFrame(bytes.NewReader(lenOnly(hdrSize-1)), 1<<20, nil)
	require.ErrorIs(t, err, ErrProtocol)
	_, err = readFrame(bytes.NewReader(lenOnly(20)[:2]), 1<<20, nil)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = readFrame(bytes.NewReader(nil), 1<<20, nil)
	require.ErrorIs(t, err, io.EOF, "a clean end between frames is io.EOF")

	// A frame announced at 256 MiB that delivers 100 bytes costs about
	// the first chunk, not 256 MiB.
	big := append(lenOnly(256<<20), make([]byte, 100)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = readFrame(bytes.NewReader(big), 1<<30, nil)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated for a truncated frame")

	// A large frame that does arrive is read whole, through the growing buffer.
	payload := make([]byte, 3<<20+17)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	p, err := readFrame(bytes.NewReader(append(lenOnly(uint32(len(payload))), payload...)), 4<<20, nil)
	require.NoError(t, err)
	require.Equal(t, payload, p)
}

// FuzzDecode feeds arbitrary bytes to the frame reader and both decoders,
// under the default limits and tiny ones. Nothing may panic; whatever
// decodes must encode back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, r := range sampleRequests {
		b := frameBytes(encodeRequest(&r))
		f.Add(b)
		f.Add(b[lenSize:])
		if len(b) > lenSize+hdrSize {
			f.Add(b[:len(b)-1])
		}
	}
	for _, s := range sampleResponses {
		f.Add(frameBytes(encodeResponse(&s.r, s.o)))
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 10, ProtocolVersion, byte(opWait), 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff})
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))

	limitSet := []limits{newLimits(DefaultMaxValueSize), newLimits(8)}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, lim := range limitSet {
			// Framed: the server's path.
			if p, err := readFrame(bytes.NewReader(data), lim.maxFrame, nil); err == nil {
				checkRequest(t, p, lim)
			} else if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("readFrame: unexpected error %v", err)
			}
			// Bare payloads, as requests and as responses to every op.
			checkRequest(t, data, lim)
			for o := opHello; o <= opLast; o++ {
				r, err := decodeResponse(data, o, lim)
				if err != nil {
					require.ErrorIs(t, err, ErrProtocol)
					continue
				}
				if o == opCancel && r.status == statusOK {
					t.Fatalf("decoded an ok response to cancel")
				}
				head, tail := encodeResponse(&r, o).frame()
				require.Equal(t, data, append(append([]byte{}, head[lenSize:]...), tail...), "response to %v re-encoded", o)
			}
		}
	})
}

func checkRequest(t *testing.T, p []byte, lim limits) {
	r, err := decodeRequest(p, lim)
	if err != nil {
		require.ErrorIs(t, err, ErrProtocol)
		return
	}
	for _, k := range append(r.keys, r.key) {
		require.LessOrEqual(t, len(k), MaxKeyLen)
	}
	require.LessOrEqual(t, len(r.value), lim.maxValue)
	head, tail := encodeRequest(&r).frame()
	require.Equal(t, p, append(append([]byte{}, head[lenSize:]...), tail...), "%v request re-encoded", r.op)
}
