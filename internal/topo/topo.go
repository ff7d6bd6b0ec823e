// Package topo holds the communication patterns that coll's agreement and the
// transports' algorithms share: k-nomial trees, rings and recursive doubling, over
// ranks renumbered so that the root is 0 ("virtual" ranks). Everything here is pure
// arithmetic on team-uniform inputs, so every rank derives the same pattern.
package topo

// Virtual renumbers rank so that root becomes 0.
func Virtual(rank, root, n int) int { return (rank - root + n) % n }

// Real is the inverse of Virtual.
func Real(v, root, n int) int { return (v + root) % n }

// Node is one rank's place in a k-nomial tree of n virtual ranks: its parent (-1 at
// the root), its children nearest first, each with the size of its subtree, and the
// size of its own subtree. A subtree is a contiguous range of virtual ranks starting at
// its root.
type Node struct {
	V        int
	Parent   int
	Children []Child
	Size     int
}

// Child is a child of a Node and the size of its subtree.
type Child struct{ V, Size int }

// KNomial returns virtual rank v's node in the k-nomial tree of radix over n ranks.
func KNomial(n, v, radix int) Node {
	node := Node{V: v, Parent: -1}
	m := 1
	for m < n {
		if v%(m*radix) != 0 {
			node.Parent = v - v%(m*radix)
			break
		}
		for j := 1; j < radix && v+j*m < n; j++ {
			c := v + j*m
			node.Children = append(node.Children, Child{c, min(m, n-c)})
		}
		m *= radix
	}
	node.Size = min(m, n-v)
	return node
}

// KNomialPeers returns rank's parent (-1 for the root) and children, as real ranks, in
// the k-nomial tree of radix over n ranks rooted at root.
func KNomialPeers(n, root, rank, radix int) (parent int, children []int) {
	node := KNomial(n, Virtual(rank, root, n), radix)
	parent = -1
	if node.Parent >= 0 {
		parent = Real(node.Parent, root, n)
	}
	for _, c := range node.Children {
		children = append(children, Real(c.V, root, n))
	}
	return parent, children
}

// Ring returns the ranks to the left (rank-1) and right (rank+1) of rank on a ring of n.
func Ring(rank, n int) (left, right int) { return (rank - 1 + n) % n, (rank + 1) % n }

// Mod is x modulo n in [0, n).
func Mod(x, n int) int { return ((x % n) + n) % n }

// IsPow2 reports whether n is a power of two.
func IsPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// Fold describes recursive doubling over a team that need not be a power of two: the
// first 2×Extra ranks pair up, the even one of each pair folds its data into the odd
// one and sits out; the P2 ranks left take part as virtual ranks 0..P2-1.
type Fold struct {
	P2, Extra int
}

// NewFold returns the fold of n ranks.
func NewFold(n int) Fold {
	p2 := 1
	for p2*2 <= n {
		p2 *= 2
	}
	return Fold{P2: p2, Extra: n - p2}
}

// SitsOut reports whether rank hands its data to rank+1 and waits for the result.
func (f Fold) SitsOut(rank int) bool { return rank < 2*f.Extra && rank%2 == 0 }

// Virtual is rank's virtual rank among the P2 that take part (-1 for one that sits out).
func (f Fold) Virtual(rank int) int {
	switch {
	case f.SitsOut(rank):
		return -1
	case rank < 2*f.Extra:
		return rank / 2
	}
	return rank - f.Extra
}

// Real is the inverse of Virtual.
func (f Fold) Real(v int) int {
	if v < f.Extra {
		return v*2 + 1
	}
	return v + f.Extra
}
