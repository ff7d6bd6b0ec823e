package coll

import (
	"hash/fnv"
	"testing"
)

// TestFNV32a: the signature hash is hash/fnv's FNV-1a, computed without allocating.
func TestFNV32a(t *testing.T) {
	for _, s := range []string{"", "a", "gather root 3 int8/sum count 1024 alg linear", "allreduce uint64/max count 7 alg rd"} {
		h := fnv.New32a()
		h.Write([]byte(s))
		if got, want := fnv32a(s), h.Sum32(); got != want {
			t.Errorf("fnv32a(%q) = %#x, hash/fnv says %#x", s, got, want)
		}
	}
}
