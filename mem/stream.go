package mem

import (
	"fmt"
	"math"
	"sync"
)

// Stream is a queue of copies that run in the order they were queued, apart
// from the caller. Copies that touch CUDA memory and no DM run on a CUDA
// stream (cuMemcpyAsync); the others run on a goroutine that the Stream starts
// while it has work and that exits when the queue is empty, so an idle Stream
// holds no goroutine. Buffers must stay open until Synchronize returns.
//
// A Stream is safe for concurrent use; copies queued from several goroutines
// run in the order in which their CopyAsync calls took the Stream's lock. The zero
// Stream is ready to use, as NewStream's.
type Stream struct {
	mu      sync.Mutex
	idle    sync.Cond // signalled when the host worker drains the queue
	queue   []asyncOp // host-side work, and GPU work queued behind it
	head    int
	running bool
	gpu     cuStream // created at the first CUDA copy
	gpuBusy bool     // GPU work queued since the stream was last drained
	gpuSeq  uint64   // counts GPU copies, so Synchronize knows none came in while it waited
	gpuN    int      // bytes of the GPU copies queued since the last wait: how long to spin
	err     error    // first failure since the last Synchronize
	closed  bool
	work    func() // s.drain, bound once: a go statement on a method value allocates
}

// inlineMax is the largest host-side copy that CopyAsync makes itself when
// nothing is queued ahead of it: handing it to a goroutine costs more than
// the copy.
const inlineMax = 64 << 10

// gpuIssueOnWorker makes the stream's goroutine issue every GPU copy, so that the
// caller (a staged root's polling thread) never pays the driver call: off by default,
// on in the diagnosis build with IBCOLL_X_GPU_WORKER=1, for experiments.
var gpuIssueOnWorker = false

type asyncOp struct {
	d, s    span
	n       int  // bytes of each row
	pitch   int  // from one row's start to the next, on both sides
	rows    int  // 1 for a plain copy
	onGPU   bool // issue as cuMemcpyAsync (cuMemcpy2DAsync for rows)
	waitGPU bool // drain the CUDA stream first: GPU copies were queued before this one
}

// NewStream returns an empty Stream. It allocates no CUDA resources until a
// CUDA copy is queued, so host-only users never initialise the driver.
func NewStream() (*Stream, error) {
	s := &Stream{}
	s.mu.Lock()
	s.ready()
	s.mu.Unlock()
	return s, nil
}

// ready binds what a Stream needs once, under s.mu: NewStream's, or a zero
// Stream's at its first use.
func (s *Stream) ready() {
	if s.work == nil {
		s.idle.L = &s.mu
		s.work = s.drain
	}
}

// CopyAsync queues a copy with Copy's semantics and returns without waiting
// for it. Argument errors are returned at once; failures of the copy itself
// are returned by the next Synchronize. A copy from pageable host memory (not
// allocated or registered with the CUDA driver) to CUDA memory is the exception:
// it goes through pinned bounce buffers after the stream's earlier work, and
// returns once it is done, since the driver's own staging of pageable memory is
// not reliably ordered before what the stream runs next.
func CopyAsync(s *Stream, dst *Buffer, dstOff int, src *Buffer, srcOff int, n int) error {
	if s == nil {
		return fmt.Errorf("mem: copy async: stream is nil: %w", ErrInvalid)
	}
	d, sp, err := resolvePair(dst, dstOff, src, srcOff, n)
	if err != nil || n == 0 {
		return err
	}
	return s.enqueue(d, sp, n, n, 1)
}

// Copy2DAsync queues the copy of rows rows of width bytes each, row i from src at
// srcOff+i*pitch to dst at dstOff+i*pitch, as CopyAsync queues one copy; rows are copied
// in order. Where a side is CUDA memory and the other pinned or CUDA memory, the rows go
// as one cuMemcpy2DAsync, which the copy engine runs as fast as one copy of all their
// bytes and which is one driver call, not rows (docs/design.md, "Session 31").
func Copy2DAsync(s *Stream, dst *Buffer, dstOff int, src *Buffer, srcOff int, width, pitch, rows int) error {
	extent, err := extent2D(s, width, pitch, rows)
	if err != nil {
		return err
	}
	d, sp, err := resolvePair(dst, dstOff, src, srcOff, extent)
	if err != nil || extent == 0 {
		return err
	}
	return s.enqueue(d, sp, width, pitch, rows)
}

// CopyPtr2DAsync queues rows as Copy2DAsync does, between raw addresses with
// CopyPtr's semantics. The memory must stay valid until Synchronize returns.
//
//go:uintptrescapes
func CopyPtr2DAsync(s *Stream, dst uintptr, dstType Type, src uintptr, srcType Type, width, pitch, rows int) error {
	extent, err := extent2D(s, width, pitch, rows)
	if err != nil {
		return err
	}
	d, sp, err := resolvePtrPair(dst, dstType, src, srcType, extent)
	if err != nil || extent == 0 {
		return err
	}
	return s.enqueue(d, sp, width, pitch, rows)
}

// extent2D checks a 2D copy's arguments and returns the bytes from its first row's
// start to its last row's end (0: it copies nothing).
func extent2D(s *Stream, width, pitch, rows int) (int, error) {
	switch {
	case s == nil:
		return 0, fmt.Errorf("mem: copy 2D async: stream is nil: %w", ErrInvalid)
	case width < 0:
		return 0, fmt.Errorf("mem: copy 2D async: width must be >= 0, got %d: %w", width, ErrInvalid)
	case rows < 0:
		return 0, fmt.Errorf("mem: copy 2D async: rows must be >= 0, got %d: %w", rows, ErrInvalid)
	case rows > 1 && pitch < width:
		return 0, fmt.Errorf("mem: copy 2D async: pitch %d is less than width %d: %w", pitch, width, ErrInvalid)
	case rows == 0 || width == 0:
		return 0, nil
	case rows > 1 && pitch > (math.MaxInt-width)/(rows-1):
		return 0, fmt.Errorf("mem: copy 2D async: %d rows at pitch %d overflow: %w", rows, pitch, ErrInvalid)
	}
	return (rows-1)*pitch + width, nil
}

// CopyPtrAsync queues a copy with CopyPtr's semantics, as CopyAsync does for
// Buffers. The memory must stay valid until Synchronize returns.
//
//go:uintptrescapes
func CopyPtrAsync(s *Stream, dst uintptr, dstType Type, src uintptr, srcType Type, n int) error {
	if s == nil {
		return fmt.Errorf("mem: copy async: stream is nil: %w", ErrInvalid)
	}
	if n < 0 {
		return fmt.Errorf("mem: copy async: n must be >= 0, got %d: %w", n, ErrInvalid)
	}
	d, sp, err := resolvePtrPair(dst, dstType, src, srcType, n)
	if err != nil || n == 0 {
		return err
	}
	return s.enqueue(d, sp, n, n, 1)
}

// enqueue queues rows copies of n bytes at pitch apart (rows 1: one copy).
func (s *Stream) enqueue(d, sp span, n, pitch, rows int) error {
	ov, _ := overlap(d, sp, (rows-1)*pitch+n)
	op := asyncOp{d: d, s: sp, n: n, pitch: pitch, rows: rows}
	op.onGPU = (isCUDA(d.t) || isCUDA(sp.t)) && d.t != DM && sp.t != DM && !ov

	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready()
	if s.closed {
		return fmt.Errorf("mem: copy async: stream is closed: %w", ErrInvalid)
	}
	if op.onGPU {
		if !s.gpu.valid() {
			g, err := cudaStreamCreate()
			if err != nil {
				return err
			}
			s.gpu = g
		}
		s.gpuBusy = true
		s.gpuSeq++
		s.gpuN += n * rows
		if !s.running && !gpuIssueOnWorker {
			// Nothing host-side is ahead of this copy, so the caller can issue it.
			if err := op.issue(s.gpu); err != nil && s.err == nil {
				s.err = err
			}
			return nil
		}
	} else {
		if !s.running && !s.gpuBusy && n*rows <= inlineMax {
			if err := op.copyRows(); err != nil && s.err == nil {
				s.err = err
			}
			return nil
		}
		op.waitGPU = s.gpuBusy
		s.gpuBusy = false
	}
	s.queue = append(s.queue, op)
	if !s.running {
		s.running = true
		go s.work()
	}
	return nil
}

func (s *Stream) drain() {
	s.mu.Lock()
	for s.head < len(s.queue) {
		op := s.queue[s.head]
		s.queue[s.head] = asyncOp{} // drop references to regions and buffers
		s.head++
		s.mu.Unlock()
		err := s.run(&op)
		s.mu.Lock()
		if err != nil && s.err == nil {
			s.err = err
		}
	}
	s.queue, s.head, s.running = s.queue[:0], 0, false
	s.idle.Broadcast()
	s.mu.Unlock()
}

func (s *Stream) run(op *asyncOp) error {
	if op.onGPU {
		return op.issue(s.gpu)
	}
	if op.waitGPU {
		if err := cudaStreamWait(s.gpu, 0); err != nil {
			return err
		}
	}
	return op.copyRows()
}

// issue queues a GPU copy on g.
func (op *asyncOp) issue(g cuStream) error {
	h2d := isCUDA(op.d.t) && !isCUDA(op.s.t)
	if op.rows > 1 {
		return cudaMemcpy2DAsync(g, op.d.p, op.s.p, op.n, op.pitch, op.rows, h2d)
	}
	return cudaMemcpyAsync(g, op.d.p, op.s.p, op.n, h2d)
}

// copyRows makes a host-side copy, row by row.
func (op *asyncOp) copyRows() error {
	for r := 0; r < op.rows; r++ {
		if err := copySpans(op.d.at(r*op.pitch), op.s.at(r*op.pitch), op.n); err != nil {
			return err
		}
	}
	return nil
}

// Synchronize waits until every copy queued so far has finished and returns
// the first error among them, then clears it. Waiting on the GPU polls
// briefly, then sleeps in the driver.
func (s *Stream) Synchronize() error {
	if s == nil {
		return fmt.Errorf("mem: synchronize: stream is nil: %w", ErrInvalid)
	}
	s.mu.Lock()
	s.ready()
	for s.running {
		s.idle.Wait()
	}
	gpu, busy, seq, queued := s.gpu, s.gpuBusy, s.gpuSeq, s.gpuN
	s.mu.Unlock()
	var gerr error
	if busy {
		gerr = cudaStreamWait(gpu, queued)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if busy && gerr == nil && s.gpuSeq == seq {
		s.gpuBusy, s.gpuN = false, 0
	}
	err := s.err
	if err == nil {
		err = gerr
	}
	s.err = nil
	return err
}

// Close waits for queued copies, releases the CUDA stream, and returns the
// first error among the copies or the release. It is idempotent and
// nil-safe.
func (s *Stream) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return nil
	}
	err := s.Synchronize()
	s.mu.Lock()
	gpu := s.gpu
	s.gpu = cuStream{}
	s.mu.Unlock()
	if gpu.valid() {
		if derr := cudaStreamDestroy(gpu); derr != nil && err == nil {
			err = derr
		}
	}
	return err
}
