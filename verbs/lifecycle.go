package verbs

import (
	"fmt"
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
}

// reserve counts a child about to be created; it fails if n is closed or
// being closed. A failed creation gives the count back with dropChild.
func (n *node) reserve(op, what string) error {
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
	n.mu.RLock()
	if n.closed {
		n.mu.RUnlock()
		return newError(op, ErrClosed, what+" is closed")
	}
	return nil
}

// wlock takes the write side for a call that changes the object's state.
func (n *node) wlock(op, what string) error {
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

// endClose finishes what beginClose started.
func (n *node) endClose(ok bool) {
	n.cmu.Lock()
	n.closed = ok
	n.closing = false
	n.cmu.Unlock()
	n.mu.Unlock()
}

// live counts open objects per kind so that tests can prove nothing leaked.
var live struct {
	mu sync.Mutex
	n  map[string]int
}

func track(kind string, d int) {
	live.mu.Lock()
	if live.n == nil {
		live.n = map[string]int{}
	}
	live.n[kind] += d
	live.mu.Unlock()
}

// LiveObjects returns the number of open objects of each kind (context,
// pd, mr, cq, qp, dm). Objects are never released by finalizers, so a
// non-zero count at the end of a test is a leak.
func LiveObjects() map[string]int {
	live.mu.Lock()
	defer live.mu.Unlock()
	m := map[string]int{}
	for k, v := range live.n {
		if v != 0 {
			m[k] = v
		}
	}
	return m
}

// CheckLeaks returns an error naming every kind of object still open.
func CheckLeaks() error {
	m := LiveObjects()
	if len(m) == 0 {
		return nil
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return fmt.Errorf("verbs: leaked objects: %s", strings.Join(parts, ", "))
}
