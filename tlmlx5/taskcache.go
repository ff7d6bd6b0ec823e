package tlmlx5

import (
	"errors"
	"slices"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
)

// The task cache: a non-persistent collective initialized again with the same shape
// (collective, root, datatype, operator, block, counts and displacements, algorithm
// asked for, and the same buffers) takes the graph, work requests, scratch and
// registrations of the last one that closed, instead of building them again, so a
// repeated Init allocates nothing here. A closed task is kept (at most
// maxCachedTasks per team, least recently closed dropped first) only when all of its
// user buffers stay valid while unused: Go slices (registered and pinned while
// kept) and open mem.Buffers of host memory (checked at reuse); raw addresses and DM
// buffers are never kept. coll's staging scratch is such a mem.Buffer: coll's scratch
// cache hands the same buffer to the next Init of the same shape, so a staged
// collective repeats without a build too. That cache keeps the scratch's registration
// with the buffer and closes it (Register's Closer) before it frees the buffer; the
// Close first releases every kept task that holds the scratch (dropCachedOn), so the
// buffer is deregistered, then freed, as before. A reused task counts the allocations
// and registrations of its scratch in the fault set as a built one would, so injected
// faults fire at the same Init.

// shape is what a task's graph depends on besides the v-layout, which is compared
// apart (counts and displacements kept with the task).
type shape struct {
	typ      collective.Type
	root     int
	dtype    collective.DType
	op       collective.Op
	inPlace  bool
	block    int
	alg      string
	sig      uint32
	src, dst bufShape
}

type bufShape struct {
	addr  uintptr
	buf   *mem.Buffer
	typ   mem.Type
	bytes int
	count int
	slice bool
}

func shapeOf(b driver.Buf) bufShape {
	return bufShape{addr: b.Addr, buf: b.Buf, typ: b.Type, bytes: b.Bytes, count: b.Count, slice: b.Slice != nil}
}

func specShape(s *driver.TaskSpec) shape {
	return shape{typ: s.Type, root: s.Root, dtype: s.DType, op: s.Op, inPlace: s.InPlace, block: s.Block, alg: s.Alg, sig: s.Sig,
		src: shapeOf(s.Src), dst: shapeOf(s.Dst)}
}

// cacheable reports whether a spec's task may be kept after Close.
func cacheable(s *driver.TaskSpec) bool {
	if s.Persistent {
		return false // coll keeps it open and re-posts it
	}
	for _, b := range [2]driver.Buf{s.Src, s.Dst} {
		switch {
		case b.Bytes == 0:
		case b.Slice != nil:
		case b.Buf != nil && b.Buf.Type() == mem.Host:
		default:
			return false
		}
	}
	return true
}

// keepable reports whether closed task k may be kept: none of its own scratch went to
// the quarantine, where a peer may still write into it.
func (k *task) keepable() bool {
	if !k.cacheKey || k.t.closed {
		return false
	}
	for _, b := range k.bufs {
		if b.kept {
			return false
		}
	}
	return true
}

// valid reports whether the user buffers of kept task k are still open.
func (k *task) valid() bool {
	for _, b := range [2]driver.Buf{k.spec.Src, k.spec.Dst} {
		if b.Buf != nil && b.Buf.Addr() != b.Addr {
			return false
		}
	}
	return true
}

// retired stands in, in the send queues, for a task that was kept: what it still
// had queued (of a post that ended) is dropped at the next flush, and cannot pass
// for the sends of the task's next life, whose posts count from 1 again.
var retired = &task{aborted: true}

// keep puts closed task k in the cache, dropping the oldest beyond maxCachedTasks.
// The dropped task's failure to release is not k's: it waits in t.unreleased, for a
// later try and the teardown, which reports it. So k's Close, once it got here,
// succeeds, and is never retried into caching k twice.
func (t *team) keep(k *task) {
	for _, pe := range t.peers {
		if pe == nil {
			continue
		}
		q := &pe.queue
		for i := 0; i < q.size; i++ {
			if it := &q.items[(q.head+i)%len(q.items)]; it.k == k {
				it.k = retired
			}
		}
	}
	if !k.ownV { // the caller's slices may change: the task keeps copies, once
		k.spec.Src.Counts, k.spec.Src.Displs = slices.Clone(k.spec.Src.Counts), slices.Clone(k.spec.Src.Displs)
		k.spec.Dst.Counts, k.spec.Dst.Displs = slices.Clone(k.spec.Dst.Counts), slices.Clone(k.spec.Dst.Displs)
		k.ownV = true
	}
	k.spec.Ready, k.spec.Landed, k.spec.Witness, k.ready, k.landed = nil, nil, nil, nil, nil
	t.cached = append(t.cached, k)
	if len(t.cached) > maxCachedTasks {
		old := t.cached[0]
		t.cached = slices.Delete(t.cached, 0, 1)
		_ = t.drop(old)
	}
}

// drop releases task k, out of the cache; what it fails to release stays with k, in
// t.unreleased, for a later try.
func (t *team) drop(k *task) error {
	if err := k.release(); err != nil {
		t.unreleased = append(t.unreleased, k)
		return err
	}
	return nil
}

// reuse takes a kept task of spec's shape, or returns nil. A fault that fires in the
// scratch allocations or registrations a build would make fails it (the task is
// dropped).
func (t *team) reuse(spec *driver.TaskSpec) (*task, error) {
	if len(t.cached) == 0 || !cacheable(spec) {
		return nil, nil
	}
	var errs []error
	for i := 0; i < len(t.cached); { // drop kept tasks whose buffers closed
		if !t.cached[i].valid() {
			k := t.cached[i]
			t.cached = slices.Delete(t.cached, i, i+1)
			errs = append(errs, t.drop(k))
			continue
		}
		i++
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	want := specShape(spec)
	for i := len(t.cached) - 1; i >= 0; i-- {
		k := t.cached[i]
		if specShape(&k.spec) != want || !sameV(k.spec.Src, spec.Src) || !sameV(k.spec.Dst, spec.Dst) {
			continue
		}
		t.cached = slices.Delete(t.cached, i, i+1)
		for _, b := range k.bufs {
			if b.own == nil {
				continue
			}
			err := t.p.Faults.Hit(fault.Alloc)
			if err == nil {
				err = t.p.Faults.Hit(fault.Reg)
			}
			if err != nil {
				return nil, errors.Join(err, t.drop(k))
			}
		}
		k.rearm(spec)
		return k, nil
	}
	return nil, nil
}

func sameV(a, b driver.Buf) bool {
	return slices.Equal(a.Counts, b.Counts) && slices.Equal(a.Displs, b.Displs)
}

// rearm makes kept task k the task of spec: a new sequence number and callbacks,
// and nothing left of the last one's ready-to-receives or evidence.
func (k *task) rearm(spec *driver.TaskSpec) {
	src, dst := k.spec.Src, k.spec.Dst // the kept copies of the v-layout
	k.spec = *spec
	k.spec.Src.Counts, k.spec.Src.Displs, k.spec.Dst.Counts, k.spec.Dst.Displs = src.Counts, src.Displs, dst.Counts, dst.Displs
	k.seq, k.ready, k.landed = spec.Seq, spec.Ready, nil
	if !spec.Type.IsReduction() {
		k.landed = spec.Landed
	}
	k.post, k.started, k.aborted, k.err, k.done = 0, false, false, nil, 0
	k.hasStray, k.strayWhy, k.stray = false, "", rtr{}
	k.waitSrc = k.waitSrc[:0]
	for i := range k.ops {
		o := &k.ops[i]
		o.haveRTR, o.haveNxt, o.rtr, o.nextRTR, o.state, o.rts = 0, [2]uint32{}, rtr{}, [2]rtr{}, opIdle, false
		o.ahead, o.aheadIn, o.aheadPieces = 0, false, 0
	}
}

// dropCachedOn releases every kept task that holds registration e: a staging scratch
// whose registration is closing, before its buffer is freed.
func (t *team) dropCachedOn(e *regEntry) error {
	holds := func(k *task) bool {
		return slices.ContainsFunc(k.bufs, func(b *lbuf) bool { return b.reg == e })
	}
	errs := []error{t.retryUnreleased(holds)}
	t.cached = slices.DeleteFunc(t.cached, func(k *task) bool {
		if holds(k) {
			errs = append(errs, t.drop(k))
			return true
		}
		return false
	})
	return errors.Join(errs...)
}

// dropCached releases every kept task (team teardown), and tries again what earlier
// releases left.
func (t *team) dropCached() error {
	errs := []error{t.retryUnreleased(func(*task) bool { return true })}
	for _, k := range t.cached {
		errs = append(errs, t.drop(k))
	}
	t.cached = nil
	return errors.Join(errs...)
}

// retryUnreleased releases again the unreleased tasks that which picks, forgetting
// those that now release everything.
func (t *team) retryUnreleased(which func(*task) bool) error {
	var errs []error
	t.unreleased = slices.DeleteFunc(t.unreleased, func(k *task) bool {
		if !which(k) {
			return false
		}
		err := k.release()
		errs = append(errs, err)
		return err == nil
	})
	return errors.Join(errs...)
}
