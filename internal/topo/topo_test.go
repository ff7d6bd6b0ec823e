package topo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every k-nomial tree is a tree: each non-root rank has exactly one parent, which
// lists it as a child, subtrees are contiguous and their sizes add up.
func TestKNomialIsATree(t *testing.T) {
	for n := 1; n <= 70; n++ {
		for _, radix := range []int{2, 3, 4, 8, n + 1} {
			if radix < 2 {
				continue
			}
			parentOf := make([]int, n)
			for i := range parentOf {
				parentOf[i] = -2
			}
			for v := 0; v < n; v++ {
				node := KNomial(n, v, radix)
				size := 1
				next := v + 1
				for _, c := range node.Children {
					require.Equal(t, next, c.V, "n=%d radix=%d v=%d: children are contiguous", n, radix, v)
					require.Equal(t, c.Size, KNomial(n, c.V, radix).Size)
					require.Equal(t, -2, parentOf[c.V])
					parentOf[c.V] = v
					size += c.Size
					next += c.Size
				}
				require.Equal(t, node.Size, size, "n=%d radix=%d v=%d", n, radix, v)
			}
			for v := 0; v < n; v++ {
				want := KNomial(n, v, radix).Parent
				if v == 0 {
					require.Equal(t, -1, want)
					continue
				}
				require.Equal(t, want, parentOf[v], "n=%d radix=%d v=%d", n, radix, v)
			}
		}
	}
}

func TestKNomialPeersRotates(t *testing.T) {
	for n := 1; n <= 20; n++ {
		for root := 0; root < n; root++ {
			for r := 0; r < n; r++ {
				p, cs := KNomialPeers(n, root, r, 4)
				if r == root {
					require.Equal(t, -1, p)
				}
				for _, c := range cs {
					pc, _ := KNomialPeers(n, root, c, 4)
					require.Equal(t, r, pc)
				}
			}
		}
	}
}

func TestFold(t *testing.T) {
	for n := 1; n <= 40; n++ {
		f := NewFold(n)
		require.True(t, IsPow2(f.P2))
		require.Equal(t, n, f.P2+f.Extra)
		seen := map[int]bool{}
		for r := 0; r < n; r++ {
			v := f.Virtual(r)
			if f.SitsOut(r) {
				require.Equal(t, -1, v)
				require.False(t, f.SitsOut(r+1), "its partner takes part")
				continue
			}
			require.False(t, seen[v])
			seen[v] = true
			require.Equal(t, r, f.Real(v))
		}
		require.Len(t, seen, f.P2)
	}
}
