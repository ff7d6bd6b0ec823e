package tlmlx5

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire encodings of this transport: work-request IDs (which come back in
// completions), the immediate of a data write, and the control-slot messages
// (ready-to-receive, and coll's messages). Control-slot bytes come from peers, so
// decoding checks everything.

// wrKind is what a work request is, in the top two bits of its ID.
type wrKind uint8

const (
	wrLoop wrKind = 0 // a local copy on the loopback QP (loopback.go)
	wrRecv wrKind = 1 // a receive posted on a control slot
	wrCtl  wrKind = 2 // a control message sent from a send slot
	wrData wrKind = 3 // a data write of a task's send operation
)

// wrID is a work request's ID: the kind in bits 62-63, then a peer rank (receives and
// control sends) or a task ID (data) in bits 32-61, then a slot or operation index in
// bits 0-31. A loopback copy's ID carries its task too.
type wrID uint64

const (
	maxWRPeer = 1<<30 - 1
	maxTaskID = 1<<30 - 1
)

func newWRID(k wrKind, who uint32, index int) wrID {
	return wrID(uint64(k)<<62 | uint64(who&maxWRPeer)<<32 | uint64(uint32(index)))
}

func recvID(peer, slot int) wrID      { return newWRID(wrRecv, uint32(peer), slot) }
func ctlID(peer, slot int) wrID       { return newWRID(wrCtl, uint32(peer), slot) }
func dataID(task uint32, op int) wrID { return newWRID(wrData, task, op) }
func loopID(task uint32, op int) wrID { return newWRID(wrLoop, task, op) }

func (w wrID) kind() wrKind { return wrKind(w >> 62) }
func (w wrID) peer() int    { return int(w>>32) & maxWRPeer }
func (w wrID) task() uint32 { return uint32(w>>32) & maxTaskID }
func (w wrID) index() int   { return int(uint32(w)) }

// The immediate of a data write: the low seqBits bits of the collective's sequence
// number, the low postBits bits of the post, the partial bit, then the tag of the
// operation. A partial write is one landing piece of a large send (see pieceOf), not
// its end: it tells the receiver that the next piece's bytes are in place. The
// transport refuses a task whose sequence number shares its low bits with an open
// one's (see NewTask), and a graph with more tags. The post bits let a receiver drop
// the data of an aborted post whose completion it had not polled yet, instead of
// taking it for the next post's.
const (
	tagBits    = 15
	maxTag     = 1<<tagBits - 1
	partialBit = 1 << tagBits
	postBits   = 2
	seqBits    = 16 - postBits
)

// SeqWindow is how many consecutive collectives of a team may be open at once: the
// sequence numbers of open requests must differ in their low bits, which is all the
// wire carries.
const SeqWindow = 1 << seqBits

// seqKey is the routing key of a sequence number: what the immediate carries.
func seqKey(seq uint64) uint16 { return uint16(seq % SeqWindow) }

func makeImm(seq uint64, post uint32, tag int, partial bool) uint32 {
	imm := uint32(seqKey(seq))<<(16+postBits) | (post%(1<<postBits))<<16 | uint32(tag&maxTag)
	if partial {
		imm |= partialBit
	}
	return imm
}

func splitImm(imm uint32) (seq uint16, post uint32, tag int, partial bool) {
	return uint16(imm >> (16 + postBits)), (imm >> 16) % (1 << postBits), int(imm & maxTag), imm&partialBit != 0
}

// eagerImmTag is the tag of the immediate that ends an eager write (eager.go): no task
// uses it, so the receiver tells the two kinds of write apart by it. Such an
// immediate carries the ring slot in its upper 16 bits, where a data write's carries
// the sequence number and post, and never the partial bit.
const eagerImmTag = maxTag

func eagerImm(slot int) uint32 { return uint32(slot)<<16 | eagerImmTag }

// eagerImmSlot returns the ring slot of an eager write's immediate, or false for a
// data write's.
func eagerImmSlot(imm uint32) (int, bool) {
	if imm&(maxTag|partialBit) != eagerImmTag {
		return 0, false
	}
	return int(imm >> 16), true
}

// Control-slot messages: one kind byte, then the payload.
const (
	slotRTR  = 0x10 // a ready-to-receive
	slotColl = 0x20 // a message of coll, passed to its handler
)

// rtr is a ready-to-receive: the receiver of tag of collective seq, post, tells the
// sender where to write its n bytes. sig is the receiver's signature of the
// collective, so that ranks running different collectives fail instead of writing;
// root is the receiver's root (noRoot for an unrooted collective), so that a root
// mismatch is reported as one, naming both roots.
type rtr struct {
	peer int
	seq  uint64
	post uint32
	tag  int
	addr uint64
	rkey uint32
	n    int
	sig  uint32
	root int
	// refused: the receiver's answer to a header it found wrong (checkEager), with its
	// own size, signature and root and no destination: evidence only, never written to.
	refused bool
}

// noRoot is rtr.root for an unrooted collective.
const noRoot = -1

// rtrLen is the wire size: kind, flags (1: refused), 2 zero bytes, seq 8, post 4, tag 4, addr 8, rkey 4,
// n 8, sig 4, root+1 4 (0: unrooted).
const rtrLen = 48

var errBadWire = errors.New("malformed control-slot message")

func (m *rtr) encode(b []byte) []byte {
	b = b[:rtrLen]
	clear(b)
	b[0] = slotRTR
	if m.refused {
		b[1] = 1
	}
	binary.LittleEndian.PutUint64(b[4:], m.seq)
	binary.LittleEndian.PutUint32(b[12:], m.post)
	binary.LittleEndian.PutUint32(b[16:], uint32(m.tag))
	binary.LittleEndian.PutUint64(b[20:], m.addr)
	binary.LittleEndian.PutUint32(b[28:], m.rkey)
	binary.LittleEndian.PutUint64(b[32:], uint64(m.n))
	binary.LittleEndian.PutUint32(b[40:], m.sig)
	binary.LittleEndian.PutUint32(b[44:], uint32(m.root+1))
	return b
}

// decodeRTR reads a ready-to-receive that peer sent.
func decodeRTR(peer int, b []byte) (rtr, error) {
	if len(b) < rtrLen || b[0] != slotRTR {
		return rtr{}, fmt.Errorf("%w: ready-to-receive of %d bytes", errBadWire, len(b))
	}
	tag := binary.LittleEndian.Uint32(b[16:])
	n := binary.LittleEndian.Uint64(b[32:])
	root := binary.LittleEndian.Uint32(b[44:])
	if tag > maxTag || n > 1<<62 || root > maxWRPeer+1 || b[1] > 1 || b[2]|b[3] != 0 {
		return rtr{}, fmt.Errorf("%w: tag %d, %d bytes, root+1 %d, flags %x", errBadWire, tag, n, root, b[1:4])
	}
	return rtr{peer: peer, seq: binary.LittleEndian.Uint64(b[4:]), post: binary.LittleEndian.Uint32(b[12:]),
		tag: int(tag), addr: binary.LittleEndian.Uint64(b[20:]), rkey: binary.LittleEndian.Uint32(b[28:]),
		n: int(n), sig: binary.LittleEndian.Uint32(b[40:]), root: int(root) - 1, refused: b[1] == 1}, nil
}

// The eager path's control-slot messages (see eager.go).
const (
	slotEager  = 0x11 // an eager message's header: its data is in the ring slot it names
	slotCredit = 0x12 // ring slots of the sender's that the receiver freed
	slotRing   = 0x13 // the sender's eager ring for the receiver
)

// eagerHdr is the header of an eager message of peer for tag of collective seq,
// post: n bytes in slot of this rank's ring for the peer (noSlot: none, only with rts;
// a header with neither is dropped). sig and root are the sender's, as a
// ready-to-receive carries the receiver's. rts: the sender had no credit; it waits for
// a ready-to-receive. size: the message goes the rendezvous way, and the header only
// tells its size (slotless too): in a v-collective, whose counts the signature does not
// carry, a receiver that expects few enough bytes for the eager path waits for a
// header, and learns the mismatch from it (tellSize).
type eagerHdr struct {
	peer int
	seq  uint64
	post uint32
	tag  int
	n    int
	sig  uint32
	root int
	slot int
	rts  bool
	size bool
}

const noSlot = -1

// eagerHdrLen is the wire size: kind, flags (1: rts, 2: size), 2 zero bytes, seq 8, post 4,
// tag 4, slot+1 4 (0: none), n 8, sig 4, root+1 4.
const eagerHdrLen = 40

// The header must fit its room at the head of a ring slot (eagerHdrRoom): encode
// re-slices within capacity, so a longer one would overwrite the data, not panic.
const _ = uint(eagerHdrRoom - eagerHdrLen)

func (m *eagerHdr) encode(b []byte) []byte {
	b = b[:eagerHdrLen]
	clear(b)
	b[0] = slotEager
	switch {
	case m.rts:
		b[1] = 1
	case m.size:
		b[1] = 2
	}
	binary.LittleEndian.PutUint64(b[4:], m.seq)
	binary.LittleEndian.PutUint32(b[12:], m.post)
	binary.LittleEndian.PutUint32(b[16:], uint32(m.tag))
	binary.LittleEndian.PutUint32(b[20:], uint32(m.slot+1))
	binary.LittleEndian.PutUint64(b[24:], uint64(m.n))
	binary.LittleEndian.PutUint32(b[32:], m.sig)
	binary.LittleEndian.PutUint32(b[36:], uint32(m.root+1))
	return b
}

// decodeEager reads an eager header that peer sent.
func decodeEager(peer int, b []byte) (eagerHdr, error) {
	if len(b) < eagerHdrLen || b[0] != slotEager {
		return eagerHdr{}, fmt.Errorf("%w: eager header of %d bytes", errBadWire, len(b))
	}
	tag := binary.LittleEndian.Uint32(b[16:])
	slot := binary.LittleEndian.Uint32(b[20:])
	n := binary.LittleEndian.Uint64(b[24:])
	root := binary.LittleEndian.Uint32(b[36:])
	rts, size := b[1] == 1, b[1] == 2
	if tag > maxTag || n > 1<<62 || root > maxWRPeer+1 || slot > maxEagerSlots || b[1] > 2 || b[2]|b[3] != 0 || ((rts || size) && slot != 0) {
		return eagerHdr{}, fmt.Errorf("%w: eager tag %d, %d bytes, slot+1 %d, root+1 %d, flags %x", errBadWire, tag, n, slot, root, b[1:4])
	}
	return eagerHdr{peer: peer, seq: binary.LittleEndian.Uint64(b[4:]), post: binary.LittleEndian.Uint32(b[12:]),
		tag: int(tag), n: int(n), sig: binary.LittleEndian.Uint32(b[32:]), root: int(root) - 1, slot: int(slot) - 1, rts: rts, size: size}, nil
}

// ringMsg announces a rank's eager ring for the receiver: slots of size bytes at addr.
type ringMsg struct {
	addr  uint64
	rkey  uint32
	slots int
	size  int
}

// ringLen: kind, 3 zero bytes, addr 8, rkey 4, slots 4, size 4.
const ringLen = 24

func (m *ringMsg) encode(b []byte) []byte {
	b = b[:ringLen]
	clear(b)
	b[0] = slotRing
	binary.LittleEndian.PutUint64(b[4:], m.addr)
	binary.LittleEndian.PutUint32(b[12:], m.rkey)
	binary.LittleEndian.PutUint32(b[16:], uint32(m.slots))
	binary.LittleEndian.PutUint32(b[20:], uint32(m.size))
	return b
}

func decodeRing(b []byte) (ringMsg, error) {
	if len(b) < ringLen || b[0] != slotRing || b[1]|b[2]|b[3] != 0 {
		return ringMsg{}, fmt.Errorf("%w: eager ring of %d bytes", errBadWire, len(b))
	}
	slots, size := binary.LittleEndian.Uint32(b[16:]), binary.LittleEndian.Uint32(b[20:])
	if slots > maxEagerSlots || size > 1<<30 {
		return ringMsg{}, fmt.Errorf("%w: eager ring of %d slots of %d bytes", errBadWire, slots, size)
	}
	return ringMsg{addr: binary.LittleEndian.Uint64(b[4:]), rkey: binary.LittleEndian.Uint32(b[12:]), slots: int(slots), size: int(size)}, nil
}

// maxCredits is how many slots one credit message returns: kind, a zero byte, the
// count (2 bytes), then the slots (2 bytes each).
const maxCredits = (slotSize - 4) / 2

func encodeCredit(b []byte, slots []uint16) []byte {
	b = b[:4+2*len(slots)]
	b[0], b[1] = slotCredit, 0
	binary.LittleEndian.PutUint16(b[2:], uint16(len(slots)))
	for i, s := range slots {
		binary.LittleEndian.PutUint16(b[4+2*i:], s)
	}
	return b
}

// decodeCredit reads a credit message into slots (of room maxCredits).
func decodeCredit(b []byte, slots []uint16) ([]uint16, error) {
	if len(b) < 4 || b[0] != slotCredit || b[1] != 0 {
		return nil, fmt.Errorf("%w: credit of %d bytes", errBadWire, len(b))
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	if n > maxCredits || len(b) < 4+2*n {
		return nil, fmt.Errorf("%w: credit for %d slots in %d bytes", errBadWire, n, len(b))
	}
	slots = slots[:0]
	for i := 0; i < n; i++ {
		slots = append(slots, binary.LittleEndian.Uint16(b[4+2*i:]))
	}
	return slots, nil
}
