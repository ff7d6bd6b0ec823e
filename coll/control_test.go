package coll

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCtlRoundTrip(t *testing.T) {
	buf := make([]byte, 64)
	for _, m := range []ctlMsg{
		{kind: ctlAbort, flags: flagAck | flagBroken, seq: 1 << 40, post: 7, origin: 3, cause: "copy-out failed"},
		{kind: ctlDone, seq: 9, post: 1, origin: 0, sig: 0xdeadbeef, root: 3},
		{kind: ctlDone, seq: 9, post: 1, origin: 0, sig: 0xdeadbeef, root: noRoot},
		{kind: ctlFin, seq: 0, post: 1<<32 - 1, origin: 2},
		{kind: ctlBroken, origin: 1, cause: "qp"},
		{kind: ctlLeft, seq: 4, origin: 3, cause: "rank 3 closed its team"},
	} {
		got, err := decodeCtl(m.encode(buf), 4, "")
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	long := ctlMsg{kind: ctlAbort, origin: 1, cause: strings.Repeat("x", 100)}
	got, err := decodeCtl(long.encode(buf), 4, "")
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("x", 64-ctlHeader-3)+"...", got.cause, "a long cause is cut to fit, marked")
}

func TestCtlDecodeRefuses(t *testing.T) {
	ok := (&ctlMsg{kind: ctlDone, origin: 1}).encode(make([]byte, 32))
	for name, b := range map[string][]byte{
		"short":        ok[:ctlHeader-1],
		"kind 0":       append([]byte{0}, ok[1:]...),
		"kind high":    append([]byte{byte(numCtlKinds)}, ok[1:]...),
		"flags":        append([]byte{ok[0], 0x80}, ok[2:]...),
		"pad":          append([]byte{ok[0], ok[1], 1}, ok[3:]...),
		"origin range": (&ctlMsg{kind: ctlDone, origin: 4}).encode(make([]byte, 32)),
	} {
		_, err := decodeCtl(b, 4, "")
		require.ErrorIs(t, err, errBadCtl, name)
	}
}

// FuzzCtlDecode: bytes from a peer never crash the decoder, and whatever decodes
// encodes back to the same message.
func FuzzCtlDecode(f *testing.F) {
	buf := make([]byte, 255)
	f.Add((&ctlMsg{kind: ctlAbort, flags: flagAck, seq: 3, post: 2, origin: 1, cause: "why"}).encode(buf), 4)
	f.Add((&ctlMsg{kind: ctlLeft, seq: 1 << 50, origin: 0}).encode(make([]byte, 255)), 1)
	f.Add([]byte{}, 2)
	f.Add((&ctlMsg{kind: ctlSig, seq: 5, origin: 2, sig: 9, cause: sigPayload(1, "gather root 1 int32 count 8 alg linear")}).encode(make([]byte, 255)), 3)
	f.Add((&ctlMsg{kind: ctlDone, seq: 5, post: 1, origin: 1, sig: 9, root: 2}).encode(make([]byte, 255)), 3)
	f.Add((&ctlMsg{kind: ctlAbort, flags: flagMismatch, seq: 5, post: 1, origin: 1, cause: "mismatch"}).encode(make([]byte, 255)), 3)
	f.Add((&ctlMsg{kind: ctlSigUp, seq: 5, post: 1, origin: 2, sig: 9, cause: sigPayload(noRoot, "allreduce int32/sum count 4 alg rd")}).encode(make([]byte, 255)), 3)
	f.Add((&ctlMsg{kind: ctlSigOK, seq: 5, post: 1, origin: 0, sig: 9, cause: sigPayload(0, "bcast root 0")}).encode(make([]byte, 255)), 3)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		if size < 1 || size > 1<<20 {
			return
		}
		m, err := decodeCtl(b, size, "")
		if err != nil {
			return
		}
		out := make([]byte, ctlHeader+len(m.cause)+4)
		m2, err := decodeCtl(m.encode(out), size, "")
		require.NoError(t, err)
		require.Equal(t, m, m2)
		// A signature's or a done's payload: a root inside the team, or none.
		if root, desc, err := decodeSigPayload(m.cause, size); err == nil {
			require.True(t, root == noRoot || (root >= 0 && root < size), "root %d of %d", root, size)
			r2, d2, err := decodeSigPayload(sigPayload(root, desc), size)
			require.NoError(t, err)
			require.Equal(t, root, r2)
			require.Equal(t, desc, d2)
		}
	})
}
