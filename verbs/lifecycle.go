package verbs

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// node is the lifecycle shared by every object. Hot-path calls (post, poll,
// wait) hold mu shared, and Close holds it exclusively, so a backend object
// is never freed under a caller. Child counts live under their own small
// lock: creating or closing a child never waits for the parent's hot-path
// calls (a CQ.Wait blocked for seconds must not hold up CreateQP).
type node struct {
	mu       sync.RWMutex
	cmu      sync.Mutex // guards children, closing and closed
	closed   bool       // written under both locks, read under either
	closing  bool
	children int

	kind string  // "context", "pd", ...: set once by register
	pc   uintptr // where the object was created, for leak reports
}

// reserve counts a child about to be created; it fails if n is closed or
// being closed. A failed creation gives the count back with dropChild.
func (n *node) reserve(op, what string) error {
	if n.kind == "" {
		return zeroObject(op, what)
	}
	n.cmu.Lock()
	defer n.cmu.Unlock()
	if n.closed || n.closing {
		return newError(op, ErrClosed, what+" is closed")
	}
	n.children++
	return nil
}

func (n *node) dropChild() {
	n.cmu.Lock()
	n.children--
	n.cmu.Unlock()
}

// rlock takes the read side for a hot-path call.
func (n *node) rlock(op, what string) error {
	if n.kind == "" {
		return zeroObject(op, what)
	}
	n.mu.RLock()
	if n.closed {
		n.mu.RUnlock()
		return newError(op, ErrClosed, what+" is closed")
	}
	return nil
}

// wlock takes the write side for a call that changes the object's state.
func (n *node) wlock(op, what string) error {
	if n.kind == "" {
		return zeroObject(op, what)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return newError(op, ErrClosed, what+" is closed")
	}
	return nil
}

// beginClose marks n as closing, so that no child can be added, and takes
// the write lock. done is true when Close has nothing to do: n is closed
// already, or busy (err wraps ErrBusy). Otherwise the caller closes the
// backend and calls endClose.
func (n *node) beginClose(op, what string) (done bool, err error) {
	if n.kind == "" {
		return true, zeroObject(op, what)
	}
	for {
		n.cmu.Lock()
		switch {
		case n.closed:
			n.cmu.Unlock()
			return true, nil
		case n.children > 0:
			c := n.children
			n.cmu.Unlock()
			return true, newError(op, ErrBusy, fmt.Sprintf("%s still has %d live child object(s)", what, c))
		case n.closing:
			// Another Close is running: wait for it, then look again.
			n.cmu.Unlock()
			n.mu.Lock()
			n.mu.Unlock()
			continue
		}
		n.closing = true
		n.cmu.Unlock()
		n.mu.Lock()
		return false, nil
	}
}

// zeroObject is the error of a call on an object that no constructor made (a zero
// value: its kind is set by register, which every constructor calls), which has no
// backend to call.
func zeroObject(op, what string) error {
	return newError(op, ErrInvalid, "a zero "+what+": only its constructor makes a usable one")
}

// endClose finishes what beginClose started.
func (n *node) endClose(ok bool) {
	n.cmu.Lock()
	n.closed = ok
	n.closing = false
	n.cmu.Unlock()
	n.mu.Unlock()
}

// live is the set of open objects, so that tests can prove nothing leaked
// and a leak report can say where each object was made.
var live struct {
	mu   sync.Mutex
	objs map[*node]struct{}
}

// register adds n to the live set as an object of kind. It keeps only the
// program counter of the code that asked for the object, skip frames
// above register's caller (0: register's caller is the exported
// constructor); turning it into file:line is left to a leak report, so
// creating an object costs one short stack walk.
func (n *node) register(kind string, skip int) {
	var pc [1]uintptr
	runtime.Callers(3+skip, pc[:]) // Callers, register, the constructor, then its caller
	n.kind, n.pc = kind, pc[0]
	live.mu.Lock()
	if live.objs == nil {
		live.objs = map[*node]struct{}{}
	}
	live.objs[n] = struct{}{}
	live.mu.Unlock()
}

func (n *node) unregister() {
	live.mu.Lock()
	delete(live.objs, n)
	live.mu.Unlock()
}

// site formats where n was created as "dir/file.go:line".
func (n *node) site() string {
	f, _ := runtime.CallersFrames([]uintptr{n.pc}).Next()
	if f.File == "" {
		return "an unknown caller"
	}
	file := f.File
	if i := strings.LastIndexByte(file, '/'); i > 0 {
		if j := strings.LastIndexByte(file[:i], '/'); j >= 0 {
			file = file[j+1:]
		}
	}
	return fmt.Sprintf("%s:%d", file, f.Line)
}

// LiveObjects returns the number of open objects of each kind (context,
// pd, mr, cq, qp, dm). Objects are never released by finalizers, so a
// non-zero count at the end of a test is a leak.
func LiveObjects() map[string]int {
	live.mu.Lock()
	defer live.mu.Unlock()
	m := map[string]int{}
	for n := range live.objs {
		m[n.kind]++
	}
	return m
}

// CheckLeaks returns nil when no object is open, else an error that names
// each open object's kind and the file:line of the code that created it,
// e.g. "verbs: 3 leaked objects: 2 mr created at dm/pool.go:88; 1 pd
// created at coll/context.go:120". Package TestMains run it at exit.
func CheckLeaks() error {
	live.mu.Lock()
	sites := map[string]int{}
	total := 0
	for n := range live.objs {
		sites[n.kind+" created at "+n.site()]++
		total++
	}
	live.mu.Unlock()
	if total == 0 {
		return nil
	}
	parts := make([]string, 0, len(sites))
	for s, k := range sites {
		parts = append(parts, fmt.Sprintf("%d %s", k, s))
	}
	sort.Strings(parts)
	return fmt.Errorf("verbs: %d leaked objects: %s", total, strings.Join(parts, "; "))
}
