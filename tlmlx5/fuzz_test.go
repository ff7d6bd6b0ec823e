package tlmlx5

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/verbs"
)

// Fuzz targets for every decoder of bytes a peer controls in this transport: the
// immediate of a data write, the work-request IDs that come back in completions, the
// team addresses (mode and QP infos) and what a peer puts in a control
// slot (ready-to-receives and coll's messages), the last driven into live tasks. The
// seeds run in plain go test.

// FuzzImmWRID: any immediate splits into fields in range, and a made immediate
// round-trips; a data write's immediate (any tag a task may use) is never taken for an
// eager write's, and an eager write's names its slot; any work-request ID decodes to
// fields in range, and a made one round-trips.
func FuzzImmWRID(f *testing.F) {
	f.Add(uint32(0), uint64(0), uint64(1), uint32(2), 3, true, uint8(1), uint32(4), 5)
	f.Add(^uint32(0), ^uint64(0), uint64(1)<<40, ^uint32(0), maxTag, false, uint8(3), uint32(maxTaskID), 1<<31)
	f.Add(makeImm(70000, 9, 17, true), uint64(dataID(5, 7)), uint64(SeqWindow+3), uint32(1), -1, true, uint8(2), uint32(1<<31), -5)
	f.Fuzz(func(t *testing.T, imm uint32, id uint64, seq uint64, post uint32, tag int, partial bool, kind uint8, who uint32, index int) {
		s, p, tg, _ := splitImm(imm)
		require.Less(t, int(s), SeqWindow)
		require.Less(t, p, uint32(1<<postBits))
		require.True(t, tg >= 0 && tg <= maxTag, "tag %d", tg)

		w := wrID(id)
		require.LessOrEqual(t, w.peer(), maxWRPeer)
		require.GreaterOrEqual(t, w.peer(), 0)
		require.LessOrEqual(t, w.task(), uint32(maxTaskID))
		require.LessOrEqual(t, w.kind(), wrKind(3))

		if tag >= 0 && tag <= maxTag {
			s, p, tg, pa := splitImm(makeImm(seq, post, tag, partial))
			require.Equal(t, seqKey(seq), s)
			require.Equal(t, post%(1<<postBits), p)
			require.Equal(t, tag, tg)
			require.Equal(t, partial, pa)
		}
		if slot, ok := eagerImmSlot(imm); ok {
			require.Equal(t, imm, eagerImm(slot), "an eager immediate is the slot and the tag alone")
			require.Less(t, slot, 1<<16)
		}
		if tag >= 0 && tag < eagerImmTag {
			_, ok := eagerImmSlot(makeImm(seq, post, tag, partial))
			require.False(t, ok, "tag %d's data write read as an eager write", tag)
		}
		slot := int(who % (1 << 16))
		got, ok := eagerImmSlot(eagerImm(slot))
		require.True(t, ok)
		require.Equal(t, slot, got)
		k := wrKind(kind%3 + 1)
		w = newWRID(k, who, index)
		require.Equal(t, k, w.kind())
		require.Equal(t, int(uint32(index)), w.index())
		require.Equal(t, who&maxWRPeer, w.task())
	})
}

// FuzzParseAddrs: addresses from the other processes never crash the parser; what
// it accepts has the sizes it promised, and a team's real addresses parse.
func FuzzParseAddrs(f *testing.F) {
	info, _ := verbs.QPInfo{LID: 1, QPN: 2, PSN: 3, MTU: 1024}.MarshalBinary()
	mesh := func(n int) []byte { return append([]byte{addrMesh}, bytes.Repeat(info, n)...) }
	f.Add(mesh(2), mesh(2), uint8(2), uint8(0))
	f.Add(mesh(2), mesh(3), uint8(2), uint8(1))
	f.Add(mesh(3), append(mesh(3), 0), uint8(3), uint8(2))
	f.Add([]byte{addrLazy}, []byte{addrLazy}, uint8(4), uint8(3))
	f.Add([]byte{}, []byte{1}, uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, a, b []byte, n, me uint8) {
		n = n%5 + 1
		addrs := make([][]byte, n)
		for r := range addrs {
			if r%2 == 0 {
				addrs[r] = a
			} else {
				addrs[r] = b
			}
		}
		infos, err := parseAddrs(addrs, int(me))
		if err != nil {
			require.ErrorIs(t, err, driver.ErrInvalid)
			return
		}
		if addrs[me][0] == addrLazy {
			require.Nil(t, infos, "a lazy team carries no QP info")
			return
		}
		require.Len(t, infos, int(n))
	})
}

// FuzzControlSlot drives what a peer may put in a control slot (ready-to-receives,
// eager headers, credits, ring announcements, coll's messages), the immediates of its
// writes and the bytes it writes into eager ring slots, into the live tasks of a 3-rank team: a bcast and an allreduce, in
// flight. The bytes say which rank hears what from whom, interleaved with posts and
// polls. Nothing may panic, a rank's buffers must not change outside what the
// collectives write (guards, and the allreduce's source), and every task must end,
// done or failed, once aborted.
func FuzzControlSlot(f *testing.F) {
	rtrMsg := (&rtr{seq: 1, post: 1, tag: 1, addr: 0, rkey: 0, n: 64, sig: 7, root: 1}).encode(make([]byte, slotSize))
	f.Add(append([]byte{0, 1, 0, byte(len(rtrMsg))}, rtrMsg...))
	f.Add([]byte{2, 3, 0, 0, 1, 2, 0, 0, 0, 1})
	f.Add([]byte{1, 0, 2, 0x10, 0, 0, 0, 2, 2, 2, 2})
	f.Add([]byte{0, 2, 1, 5, slotColl, 1, 2, 3, 4, 3, 3})
	// Eager headers for both tasks' tags, a forged write into a ring slot, credits
	// and a second ring announcement.
	for _, h := range []eagerHdr{{seq: 1, post: 1, tag: 0, n: 64, slot: 0}, {seq: 2, post: 1, tag: 1, n: 32, slot: 1},
		{seq: 2, post: 2, tag: 0, n: 32, slot: noSlot, rts: true}, {seq: 1, post: 1, tag: 4, n: 0, slot: noSlot}} {
		m := h.encode(make([]byte, slotSize))
		f.Add(append([]byte{4, 1, 0, 0, 64, 9, 9, 9, 9, 3, 3, 3, 0, 1, 0, byte(len(m))}, append(m, 3, 0, 0, 7)...))
	}
	// An eager write: a header at a slot's head, then the immediate that names the slot
	// (and one that names another).
	for _, s := range []int{0, 1} {
		m := (&eagerHdr{seq: 1, post: 1, tag: 0, n: 8, slot: 0}).encode(make([]byte, eagerHdrLen))
		imm := eagerImm(s)
		seed := append([]byte{2, 0, 0, 4, 1, 0, 0, byte(len(m))}, m...)
		f.Add(append(seed, 1, 1, 0, byte(imm), byte(imm>>8), byte(imm>>16), byte(imm>>24), 3, 0, 0, 7))
	}
	cr := encodeCredit(make([]byte, slotSize), []uint16{0, 1, 500})
	f.Add(append([]byte{0, 0, 1, byte(len(cr))}, cr...))
	ring := (&ringMsg{addr: 1 << 40, rkey: 5, slots: 4, size: eagerMaxFor(3)}).encode(make([]byte, slotSize))
	f.Add(append([]byte{0, 0, 1, byte(len(ring))}, ring...))
	f.Fuzz(func(t *testing.T, data []byte) {
		const n = 3
		ft := newFakeTeam(t, n, nil)
		dt := collective.Int32
		seqB, seqA := ft.newSeq(), ft.newSeq()
		var runs []*rankRun
		var tasks []driver.Task
		for r := 0; r < n; r++ {
			runs = append(runs,
				newRankRun(t, seqB, collective.Bcast, dt, 0, "knomial", collective.Args{Rank: r, Size: n, Root: 1, Src: collective.Buf{Count: 16}}),
				newRankRun(t, seqA, collective.Allreduce, dt, collective.OpSum, "rd",
					collective.Args{Rank: r, Size: n, Src: collective.Buf{Count: 8}, Dst: collective.Buf{Count: 8}}))
		}
		for i, rr := range runs {
			for j := range rr.src.b {
				rr.src.b[j] = byte(i*7 + j)
			}
			for j := range rr.dst.b {
				rr.dst.b[j] = byte(i*5 + j)
			}
		}
		before := make([][2][]byte, len(runs))
		for i, rr := range runs {
			before[i] = [2][]byte{bytes.Clone(rr.src.b), bytes.Clone(rr.dst.b)}
		}
		for i, rr := range runs {
			k, err := ft.newTask(i/2, &rr.spec)
			require.NoError(t, err)
			tasks = append(tasks, k)
		}
		defer ft.quiesce(t, tasks)
		teams := make([]*team, n)
		for r := range teams {
			teams[r] = ft.eps[r].(*team)
		}
		posted := uint32(0)
		for i := 0; i+3 <= len(data); {
			op, to, from := data[i]%5, int(data[i+1])%n, int(data[i+2])%n
			i += 3
			switch op {
			case 0: // a control slot's bytes
				if i >= len(data) {
					break
				}
				l := min(int(data[i])%slotSize+1, len(data)-i-1)
				i++
				if l < 1 || from == to {
					i += max(l, 0)
					break
				}
				teams[to].onSlot(from, bytes.Clone(data[i:i+l]), ft.hs[to])
				i += l
			case 1: // the immediate of a write
				if i+4 > len(data) || from == to {
					i += 4
					break
				}
				imm := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
				i += 4
				teams[to].onImm(from, imm)
			case 2: // every task posts again
				if posted < 3 {
					posted++
					for _, k := range tasks {
						_ = k.Post(posted)
					}
				}
			case 3:
				for j := 0; j <= int(data[i-1]%8); j++ {
					ft.poll(t)
				}
			case 4: // a peer's write into a slot of the eager ring it has, header room included
				if i+2 > len(data) || from == to {
					i += 2
					break
				}
				l := min(int(data[i+1]), len(data)-i-2)
				if pe := teams[to].peers[from]; pe != nil && pe.eager != nil { // a lazy link may not be up yet
					e := pe.eager
					copy(e.ring.mem[(int(data[i])%len(e.held))*teams[to].eagerStride():], data[i+2:i+2+l])
				}
				i += 2 + l
			}
		}
		for j := 0; j < 20; j++ {
			ft.poll(t)
		}
		for i, rr := range runs {
			// Guards never change; the allreduce's source is only read.
			require.Equal(t, before[i][0][rr.src.bytes:], rr.src.b[rr.src.bytes:], "run %d Src guard", i)
			require.Equal(t, before[i][1][rr.dst.bytes:], rr.dst.b[rr.dst.bytes:], "run %d Dst guard", i)
			if rr.spec.Type == collective.Allreduce {
				require.Equal(t, before[i][0], rr.src.b, "run %d allreduce Src", i)
			}
		}
	})
}
