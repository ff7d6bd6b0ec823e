package coll

// knomial returns the parent (-1 for the root) and children of rank in a k-nomial tree
// of n ranks rooted at root. Children come nearest first.
func knomial(n, root, rank, radix int) (parent int, children []int) {
	v := (rank - root + n) % n
	parent = -1
	m := 1
	for m < n {
		if v%(m*radix) != 0 {
			parent = (v - v%(m*radix) + root) % n
			break
		}
		for j := 1; j < radix && v+j*m < n; j++ {
			children = append(children, (v+j*m+root)%n)
		}
		m *= radix
	}
	return parent, children
}
