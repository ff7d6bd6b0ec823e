package coll_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"time"
	"unsafe"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
)

// scenario is one collective on one team, checked against a plain-Go reference.
type scenario struct {
	typ     coll.CollType
	alg     string
	root    int
	dt      coll.DType
	op      coll.Op
	count   int // per-rank block (elements); v-collectives draw their own counts
	inPlace bool
	reps    int // posts; > 1 makes the request persistent
	// Per rank: memory type of src and dst, and how the buffer is given.
	srcType, dstType []mem.Type
	how              []int // 0 Slice (host only), 1 Buf, 2 Addr
	counts, displs   []int // v-collectives with one layout for every rank
	// alltoallv: per rank, the layouts of src and dst (rank r sends a[r][p] elements to
	// p; in place, the matrix is symmetric and dst's layout serves both ways).
	srcV, dstV []vlayout
	// staging is filled by a successful run: each rank's Request.Staging.
	staging []coll.StagingReport
	// dmFrom, when set, is where DM buffers come from instead of each rank's context.
	dmFrom mem.Allocator
	// opOf, when set, is each rank's Args.Op in place of op (a non-reduction ignores it).
	opOf func(rank int) coll.Op
}

type vlayout struct{ counts, displs []int }

// randLayout places counts at random gaps, sometimes out of order.
func randLayout(rnd *rand.Rand, counts []int) vlayout {
	n := len(counts)
	l := vlayout{counts: counts, displs: make([]int, n)}
	off := 0
	for i := range counts {
		off += rnd.IntN(3)
		l.displs[i] = off
		off += counts[i]
	}
	// A v-layout need not be ordered.
	if rnd.IntN(2) == 0 && n > 1 {
		i, j := rnd.IntN(n), rnd.IntN(n)
		if counts[i] == counts[j] {
			l.displs[i], l.displs[j] = l.displs[j], l.displs[i]
		}
	}
	return l
}

func (l vlayout) extent() int {
	ext := 0
	for i := range l.counts {
		if l.counts[i] > 0 {
			ext = max(ext, l.displs[i]+l.counts[i])
		}
	}
	return ext
}

func (s *scenario) String() string {
	ip := ""
	if s.inPlace {
		ip = " in-place"
	}
	return fmt.Sprintf("%v/%s root %d %v/%v count %d%s reps %d", s.typ, s.alg, s.root, s.dt, s.op, s.count, ip, s.reps)
}

// tbuf is one test buffer of some memory type.
type tbuf struct {
	b     *mem.Buffer
	slice []byte
	typ   mem.Type
	n     int
}

// newTBuf allocates n bytes of typ; DM comes from dmAlloc.
func newTBuf(typ mem.Type, n int, how int, dmAlloc func(int) (*mem.Buffer, error)) (*tbuf, error) {
	tb := &tbuf{typ: typ, n: n}
	if n == 0 {
		return tb, nil
	}
	if typ == mem.Host && how == 0 {
		tb.slice = make([]byte, n)
		return tb, nil
	}
	alloc := mem.Alloc
	if typ == mem.DM {
		alloc = func(_ mem.Type, n int) (*mem.Buffer, error) { return dmAlloc(n) }
	}
	b, err := alloc(typ, n)
	if err != nil {
		return nil, err
	}
	tb.b = b
	return tb, nil
}

func (tb *tbuf) close() error {
	if tb == nil || tb.b == nil {
		return nil
	}
	return tb.b.Close()
}

func (tb *tbuf) desc(how int, count int) coll.BufferDesc {
	d := coll.BufferDesc{Type: tb.typ, Count: count}
	switch {
	case tb.n == 0:
	case tb.slice != nil:
		d.Slice = tb.slice
	case how == 1 || tb.typ == mem.DM: // DM has no address
		d.Buf = tb.b
	default:
		d.Addr = tb.b.Addr()
	}
	return d
}

func (tb *tbuf) write(off int, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if tb.slice != nil {
		copy(tb.slice[off:], p)
		return nil
	}
	if tb.typ == mem.DM {
		return tb.b.Region().CopyTo(off, p)
	}
	// p's address goes as an integer, which keeps nothing alive: without KeepAlive the
	// collector may free p during the copy (a -race run's checkptr caught it).
	err := mem.CopyPtr(tb.b.Addr()+uintptr(off), tb.typ, uintptr(unsafe.Pointer(&p[0])), mem.Host, len(p))
	runtime.KeepAlive(p)
	return err
}

func (tb *tbuf) read() ([]byte, error) {
	out := make([]byte, tb.n)
	if tb.n == 0 {
		return out, nil
	}
	if tb.slice != nil {
		copy(out, tb.slice)
		return out, nil
	}
	if tb.typ == mem.DM {
		return out, tb.b.Region().CopyFrom(out, 0)
	}
	return out, mem.CopyPtr(uintptr(unsafe.Pointer(&out[0])), mem.Host, tb.b.Addr(), tb.typ, tb.n)
}

// genData makes count elements of dt that the reference computes exactly for op.
func genData(r *rand.Rand, dt coll.DType, op coll.Op, count int) []byte {
	sz := dt.Size()
	out := make([]byte, count*sz)
	if !dt.IsFloat() && (op == 0 || op.IsBitwise() || op == coll.OpMin || op == coll.OpMax) {
		for i := range out {
			out[i] = byte(r.Uint32())
		}
		return out
	}
	for i := 0; i < count; i++ {
		var v float64
		switch op {
		case coll.OpProd:
			v = []float64{-2, -1, 1, 2}[r.IntN(4)]
		case coll.OpLand, coll.OpLor, coll.OpLxor:
			v = float64(r.IntN(2) * (1 + r.IntN(3)))
		default:
			v = float64(r.IntN(9) - 4)
		}
		if op == 0 && dt.IsFloat() {
			v = float64(r.IntN(2001)-1000) / 8
		}
		putElem(out[i*sz:], dt, v)
	}
	return out
}

func putElem(b []byte, dt coll.DType, v float64) {
	switch dt {
	case coll.Int8, coll.Uint8:
		b[0] = byte(int64(v))
	case coll.Int16, coll.Uint16:
		binary.LittleEndian.PutUint16(b, uint16(int64(v)))
	case coll.Int32, coll.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(int64(v)))
	case coll.Int64, coll.Uint64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	case coll.Float16:
		binary.LittleEndian.PutUint16(b, f16Bits(float64(float32(v))))
	case coll.BFloat16:
		binary.LittleEndian.PutUint16(b, bf16Bits(float64(float32(v))))
	case coll.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case coll.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
}

// elem reads element i as an int64 (integers, sign- or zero-extended) or float64.
func elemI(b []byte, dt coll.DType) int64 {
	switch dt {
	case coll.Int8:
		return int64(int8(b[0]))
	case coll.Uint8:
		return int64(b[0])
	case coll.Int16:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case coll.Uint16:
		return int64(binary.LittleEndian.Uint16(b))
	case coll.Int32:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	case coll.Uint32:
		return int64(binary.LittleEndian.Uint32(b))
	}
	return int64(binary.LittleEndian.Uint64(b))
}

func elemF(b []byte, dt coll.DType) float64 {
	switch dt {
	case coll.Float16:
		return f16Value(binary.LittleEndian.Uint16(b))
	case coll.BFloat16:
		return bf16Value(binary.LittleEndian.Uint16(b))
	case coll.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// refReduce combines the ranks' vectors in rank order, in plain Go.
func refReduce(in [][]byte, dt coll.DType, op coll.Op) []byte {
	sz := dt.Size()
	n := len(in)
	out := make([]byte, len(in[0]))
	unsigned := dt >= coll.Uint8 && dt <= coll.Uint64
	for i := 0; i < len(out); i += sz {
		if dt.IsInteger() {
			acc := elemI(in[0][i:], dt)
			for r := 1; r < n; r++ {
				v := elemI(in[r][i:], dt)
				switch op {
				case coll.OpSum, coll.OpAvg:
					acc += v
				case coll.OpProd:
					acc *= v
				case coll.OpMin, coll.OpMax:
					less := acc < v
					if unsigned && dt == coll.Uint64 {
						less = uint64(acc) < uint64(v)
					}
					if (op == coll.OpMin) != less {
						acc = v
					}
				case coll.OpBand:
					acc &= v
				case coll.OpBor:
					acc |= v
				case coll.OpBxor:
					acc ^= v
				case coll.OpLand:
					acc = b2i(acc != 0 && v != 0)
				case coll.OpLor:
					acc = b2i(acc != 0 || v != 0)
				case coll.OpLxor:
					acc = b2i((acc != 0) != (v != 0))
				}
			}
			tmp := make([]byte, 8)
			binary.LittleEndian.PutUint64(tmp, uint64(acc))
			copy(out[i:i+sz], tmp)
			if op == coll.OpAvg {
				avgInt(out[i:i+sz], dt, n)
			}
			continue
		}
		acc := elemF(in[0][i:], dt)
		for r := 1; r < n; r++ {
			v := elemF(in[r][i:], dt)
			switch op {
			case coll.OpSum, coll.OpAvg:
				acc += v
			case coll.OpProd:
				acc *= v
			case coll.OpMin:
				acc = math.Min(acc, v)
			case coll.OpMax:
				acc = math.Max(acc, v)
			case coll.OpLand:
				acc = float64(b2i(acc != 0 && v != 0))
			case coll.OpLor:
				acc = float64(b2i(acc != 0 || v != 0))
			case coll.OpLxor:
				acc = float64(b2i((acc != 0) != (v != 0)))
			}
		}
		if op == coll.OpAvg {
			if dt == coll.Float64 {
				acc /= float64(n)
			} else {
				acc = float64(float32(acc) / float32(n))
			}
		}
		if dt == coll.Float32 || dt == coll.Float16 || dt == coll.BFloat16 {
			acc = float64(float32(acc))
		}
		putElem(out[i:], dt, acc)
	}
	return out
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// avgInt divides a wrapped integer sum by n in the element's own type.
func avgInt(b []byte, dt coll.DType, n int) {
	switch dt {
	case coll.Int8:
		b[0] = byte(int8(b[0]) / int8(n))
	case coll.Uint8:
		b[0] = b[0] / uint8(n)
	case coll.Int16:
		binary.LittleEndian.PutUint16(b, uint16(int16(binary.LittleEndian.Uint16(b))/int16(n)))
	case coll.Uint16:
		binary.LittleEndian.PutUint16(b, binary.LittleEndian.Uint16(b)/uint16(n))
	case coll.Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(binary.LittleEndian.Uint32(b))/int32(n)))
	case coll.Uint32:
		binary.LittleEndian.PutUint32(b, binary.LittleEndian.Uint32(b)/uint32(n))
	case coll.Int64:
		binary.LittleEndian.PutUint64(b, uint64(int64(binary.LittleEndian.Uint64(b))/int64(n)))
	case coll.Uint64:
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)/uint64(n))
	}
}

// rankBufs are one rank's buffers of a scenario, and what they must hold.
type rankBufs struct {
	src, dst *tbuf
	a        coll.Args
}

// run executes the scenario on w and checks every rank's result after every post.
func (s *scenario) run(ctx context.Context, w *world, rnd *rand.Rand) error {
	n := w.n
	rb, cleanup, err := s.prepare(w, rnd)
	defer cleanup()
	if err != nil {
		return err
	}
	return s.exec(ctx, w, rnd, rb, n)
}

// prepare allocates every rank's buffers and Args.
func (s *scenario) prepare(w *world, rnd *rand.Rand) ([]*rankBufs, func(), error) {
	n, dt := w.n, s.dt.Size()
	rb := make([]*rankBufs, n)
	cleanup := func() {
		for _, b := range rb {
			if b != nil {
				_ = b.src.close()
				_ = b.dst.close()
			}
		}
	}
	cnt := s.count
	switch s.typ {
	case coll.Gatherv, coll.Scatterv, coll.Allgatherv:
		counts := make([]int, n)
		for i := range counts {
			counts[i] = rnd.IntN(cnt + 1)
		}
		l := randLayout(rnd, counts)
		s.counts, s.displs = l.counts, l.displs
	case coll.Alltoallv:
		a := make([][]int, n)
		for r := range a {
			a[r] = make([]int, n)
			for p := range a[r] {
				a[r][p] = rnd.IntN(cnt + 1)
				if s.inPlace && p < r {
					a[r][p] = a[p][r]
				}
			}
		}
		s.srcV, s.dstV = make([]vlayout, n), make([]vlayout, n)
		for r := range n {
			from := make([]int, n)
			for p := range n {
				from[p] = a[p][r]
			}
			s.srcV[r], s.dstV[r] = randLayout(rnd, a[r]), randLayout(rnd, from)
		}
	}
	for r := 0; r < n; r++ {
		a := coll.Args{Type: s.typ, Root: s.root, DType: s.dt, Op: s.op, Alg: s.alg}
		if s.opOf != nil {
			a.Op = s.opOf(r)
		}
		if s.inPlace {
			a.Flags |= coll.InPlace
		}
		if s.reps > 1 {
			a.Flags |= coll.Persistent
		}
		root := r == s.root
		var sc, dc int // element counts of src and dst on this rank
		switch s.typ {
		case coll.Bcast:
			sc = cnt
		case coll.Gather:
			sc = cnt
			if root {
				dc = n * cnt
			}
		case coll.Gatherv:
			sc = s.counts[r]
			if root {
				dc = -1
			}
		case coll.Scatter:
			dc = cnt
			if root {
				sc = n * cnt
			}
		case coll.Scatterv:
			dc = s.counts[r]
			if root {
				sc = -1
			}
		case coll.Reduce:
			sc = cnt
			if root {
				dc = cnt
			}
		case coll.Allgather:
			sc, dc = cnt, n*cnt
		case coll.Allreduce:
			sc, dc = cnt, cnt
		case coll.Alltoall:
			sc, dc = n*cnt, n*cnt
		case coll.ReduceScatter:
			sc, dc = n*cnt, cnt
		case coll.Allgatherv:
			sc, dc = s.counts[r], -1
		case coll.Alltoallv:
			sc, dc = -1, -1
		}
		ip := s.inPlace && (!s.typ.IsRooted() || root) && s.typ != coll.Bcast
		if ip {
			switch s.typ {
			case coll.Scatter, coll.Scatterv:
				dc = 0
			case coll.ReduceScatter:
				sc, dc = 0, n*cnt
			default:
				sc = 0
			}
		}
		b := &rankBufs{}
		rb[r] = b
		var err error
		sv, dv := vlayout{s.counts, s.displs}, vlayout{s.counts, s.displs}
		if s.typ == coll.Alltoallv {
			sv, dv = s.srcV[r], s.dstV[r]
		}
		sBytes, dBytes := sc*dt, dc*dt
		if sc < 0 {
			sBytes = sv.extent() * dt
		}
		if dc < 0 {
			dBytes = dv.extent() * dt
		}
		// DM comes from the rank's own context, whose teams use it in place, unless
		// the scenario names another allocator.
		dmAlloc := w.ranks[r].ctx.AllocDM
		if s.dmFrom != nil {
			dmAlloc = func(n int) (*mem.Buffer, error) { return mem.AllocFrom(mem.DM, s.dmFrom, n) }
		}
		if b.src, err = newTBuf(s.srcType[r], sBytes, s.how[r], dmAlloc); err != nil {
			return rb, cleanup, err
		}
		if b.dst, err = newTBuf(s.dstType[r], dBytes, s.how[r], dmAlloc); err != nil {
			return rb, cleanup, err
		}
		a.Src = b.src.desc(s.how[r], max(sc, 0))
		a.Dst = b.dst.desc(s.how[r], max(dc, 0))
		if sc < 0 {
			a.Src.Counts, a.Src.Displs = sv.counts, sv.displs
		}
		if dc < 0 {
			a.Dst.Counts, a.Dst.Displs = dv.counts, dv.displs
		}
		if ip && s.typ != coll.Scatter && s.typ != coll.Scatterv {
			a.Dst.Count = dc
		}
		// Gaps and unused bytes start random too: they must stay untouched.
		if err := b.src.write(0, genData(rnd, coll.Uint8, 0, b.src.n)); err != nil {
			return rb, cleanup, err
		}
		if err := b.dst.write(0, genData(rnd, coll.Uint8, 0, b.dst.n)); err != nil {
			return rb, cleanup, err
		}
		b.a = a
	}
	return rb, cleanup, nil
}

// exec initializes, posts s.reps times and checks.
func (s *scenario) exec(ctx context.Context, w *world, rnd *rand.Rand, rb []*rankBufs, n int) error {
	reqs := make([]*coll.Request, n)
	defer func() {
		for _, q := range reqs {
			_ = q.Close()
		}
	}()
	errs := w.run(func(r *rank) error {
		q, err := r.team.Init(rb[r.r].a)
		reqs[r.r] = q
		return err
	})
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%v: rank %d Init: %w", s, i, err)
		}
	}
	for rep := 0; rep < s.reps; rep++ {
		want, err := s.fill(rb, rnd, n)
		if err != nil {
			return err
		}
		errs := w.run(func(r *rank) error {
			if err := reqs[r.r].Post(); err != nil {
				return err
			}
			return reqs[r.r].Wait(ctx)
		})
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("%v: post %d: rank %d: %w", s, rep+1, i, err)
			}
		}
		if err := s.check(rb, want, rep); err != nil {
			return err
		}
	}
	s.staging = make([]coll.StagingReport, n)
	for i, q := range reqs {
		s.staging[i] = q.Staging()
	}
	return nil
}

// check compares every rank's buffers with want, as fill returned it for post rep
// (counting from 0).
func (s *scenario) check(rb []*rankBufs, want [][2][]byte, rep int) error {
	for r := range rb {
		if err := s.checkRank(rb, want, rep, r); err != nil {
			return err
		}
	}
	return nil
}

// checkRank checks rank r's buffers after post rep+1 against want.
func (s *scenario) checkRank(rb []*rankBufs, want [][2][]byte, rep, r int) error {
	{
		for _, side := range []struct {
			name string
			b    *tbuf
			want []byte
		}{{"src", rb[r].src, want[r][0]}, {"dst", rb[r].dst, want[r][1]}} {
			if side.want == nil {
				continue
			}
			got, err := side.b.read()
			if err != nil {
				return err
			}
			if i := firstDiff(side.want, got); i >= 0 {
				return fmt.Errorf("%v: post %d: rank %d %s (%v): first difference at byte %d of %d: want %#x, got %#x",
					s, rep+1, r, side.name, side.b.typ, i, len(got), side.want[i], got[i])
			}
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return len(a)
	}
	return -1
}

// fill writes fresh input for one post into every rank's buffers and returns, per
// rank, the expected contents of src and dst after it (nil: not checked).
func (s *scenario) fill(rb []*rankBufs, rnd *rand.Rand, n int) ([][2][]byte, error) {
	dt := s.dt.Size()
	cnt := s.count
	want := make([][2][]byte, n)
	cur := make([][2][]byte, n)
	for r := 0; r < n; r++ {
		var err error
		if cur[r][0], err = rb[r].src.read(); err != nil {
			return nil, err
		}
		if cur[r][1], err = rb[r].dst.read(); err != nil {
			return nil, err
		}
	}
	// in is the buffer that holds rank r's input: src, or dst in place.
	inPlace := func(r int) bool {
		return s.inPlace && (!s.typ.IsRooted() || r == s.root) && s.typ != coll.Bcast
	}
	input := func(r int) int {
		if inPlace(r) && s.typ != coll.Scatter && s.typ != coll.Scatterv {
			return 1
		}
		return 0
	}
	put := func(r, side, off int, p []byte) { place(cur[r][side], off, p) }
	switch s.typ {
	case coll.Barrier:
		return want, nil
	case coll.ReduceScatter:
		in := make([][]byte, n)
		for r := 0; r < n; r++ {
			in[r] = genData(rnd, s.dt, s.op, n*cnt)
			put(r, input(r), 0, in[r])
		}
		res := refReduce(in, s.dt, s.op)
		for r := 0; r < n; r++ {
			want[r][1] = append([]byte(nil), cur[r][1]...)
			off := 0
			if inPlace(r) {
				off = r * cnt * dt
			}
			copy(want[r][1][off:], res[r*cnt*dt:(r+1)*cnt*dt])
		}
	case coll.Allgatherv:
		blocks := make([][]byte, n)
		for r := 0; r < n; r++ {
			blocks[r] = genData(rnd, s.dt, 0, s.counts[r])
			if input(r) == 1 {
				put(r, 1, s.displs[r]*dt, blocks[r])
			} else {
				put(r, 0, 0, blocks[r])
			}
		}
		for r := 0; r < n; r++ {
			want[r][1] = append([]byte(nil), cur[r][1]...)
			for p := 0; p < n; p++ {
				place(want[r][1], s.displs[p]*dt, blocks[p])
			}
		}
	case coll.Alltoallv:
		blocks := make([][][]byte, n) // [from][to]
		for r := 0; r < n; r++ {
			blocks[r] = make([][]byte, n)
			out := s.srcV[r]
			if inPlace(r) {
				out = s.dstV[r]
			}
			for p := 0; p < n; p++ {
				blocks[r][p] = genData(rnd, s.dt, 0, out.counts[p])
				put(r, input(r), out.displs[p]*dt, blocks[r][p])
			}
		}
		for r := 0; r < n; r++ {
			want[r][1] = append([]byte(nil), cur[r][1]...)
			for p := 0; p < n; p++ {
				place(want[r][1], s.dstV[r].displs[p]*dt, blocks[p][r])
			}
		}
	case coll.Bcast:
		data := genData(rnd, s.dt, 0, cnt)
		put(s.root, 0, 0, data)
		for r := 0; r < n; r++ {
			want[r][0] = append([]byte(nil), cur[r][0]...)
			copy(want[r][0], data)
		}
	case coll.Gather, coll.Gatherv:
		blocks := make([][]byte, n)
		for r := 0; r < n; r++ {
			c := cnt
			off := r * cnt * dt
			if s.typ == coll.Gatherv {
				c, off = s.counts[r], s.displs[r]*dt
			}
			blocks[r] = genData(rnd, s.dt, 0, c)
			if input(r) == 1 {
				put(r, 1, off, blocks[r])
			} else {
				put(r, 0, 0, blocks[r])
			}
		}
		root := s.root
		want[root][1] = append([]byte(nil), cur[root][1]...)
		for r := 0; r < n; r++ {
			off := r * cnt * dt
			if s.typ == coll.Gatherv {
				off = s.displs[r] * dt
			}
			place(want[root][1], off, blocks[r])
		}
	case coll.Scatter, coll.Scatterv:
		root := s.root
		for r := 0; r < n; r++ {
			c, off := cnt, r*cnt*dt
			if s.typ == coll.Scatterv {
				c, off = s.counts[r], s.displs[r]*dt
			}
			blk := genData(rnd, s.dt, 0, c)
			put(root, 0, off, blk)
			if r == root && inPlace(r) {
				continue
			}
			want[r][1] = append([]byte(nil), cur[r][1]...)
			copy(want[r][1], blk)
		}
	case coll.Reduce, coll.Allreduce:
		in := make([][]byte, n)
		for r := 0; r < n; r++ {
			in[r] = genData(rnd, s.dt, s.op, cnt)
			put(r, input(r), 0, in[r])
		}
		res := refReduce(in, s.dt, s.op)
		for r := 0; r < n; r++ {
			if s.typ == coll.Reduce && r != s.root {
				continue
			}
			want[r][1] = append([]byte(nil), cur[r][1]...)
			copy(want[r][1], res)
		}
	case coll.Allgather:
		blocks := make([][]byte, n)
		for r := 0; r < n; r++ {
			blocks[r] = genData(rnd, s.dt, 0, cnt)
			if input(r) == 1 {
				put(r, 1, r*cnt*dt, blocks[r])
			} else {
				put(r, 0, 0, blocks[r])
			}
		}
		for r := 0; r < n; r++ {
			want[r][1] = make([]byte, 0, n*cnt*dt)
			for _, b := range blocks {
				want[r][1] = append(want[r][1], b...)
			}
		}
	case coll.Alltoall:
		blocks := make([][][]byte, n)
		for r := 0; r < n; r++ {
			blocks[r] = make([][]byte, n)
			for p := 0; p < n; p++ {
				blocks[r][p] = genData(rnd, s.dt, 0, cnt)
				put(r, input(r), p*cnt*dt, blocks[r][p])
			}
		}
		for r := 0; r < n; r++ {
			want[r][1] = nil
			for p := 0; p < n; p++ {
				want[r][1] = append(want[r][1], blocks[p][r]...)
			}
		}
	}
	for r := 0; r < n; r++ {
		if err := rb[r].src.write(0, cur[r][0]); err != nil {
			return nil, err
		}
		if err := rb[r].dst.write(0, cur[r][1]); err != nil {
			return nil, err
		}
		// A source is never written by a collective.
		if want[r][0] == nil && s.typ != coll.Bcast && rb[r].src.n > 0 && input(r) == 0 {
			want[r][0] = append([]byte(nil), cur[r][0]...)
		}
	}
	return want, nil
}

var _ = time.Second

// place copies p into b at off; an empty p may sit past b's end (a v-layout's
// zero-count entries are outside its extent).
func place(b []byte, off int, p []byte) {
	if len(p) > 0 {
		copy(b[off:], p)
	}
}
