package asym

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCoalesce(t *testing.T) {
	for _, c := range []struct{ in, want []Span }{
		{nil, nil},
		{[]Span{{Off: 5, Len: 3}}, []Span{{Off: 5, Len: 3}}},
		// out of order, adjacent: one range
		{[]Span{{Off: 8, Len: 8}, {Off: 0, Len: 8}, {Off: 16, Len: 8}}, []Span{{Off: 0, Len: 24}}},
		// a gap stays; overlapping ranges stay apart (each is copied, and counted), and
		// a range joins only the one before it in offset order
		{[]Span{{Off: 30, Len: 5}, {Off: 0, Len: 10}, {Off: 10, Len: 3}, {Off: 2, Len: 3}},
			[]Span{{Off: 0, Len: 10}, {Off: 2, Len: 3}, {Off: 10, Len: 3}, {Off: 30, Len: 5}}},
		{[]Span{{Off: 30, Len: 5}, {Off: 0, Len: 10}, {Off: 10, Len: 20}}, []Span{{Off: 0, Len: 35}}},
	} {
		require.Equal(t, c.want, coalesce(slices.Clone(c.in)), "coalesce(%v)", c.in)
	}
}
