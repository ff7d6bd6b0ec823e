//go:build race

package coll_test

// raceEnabled: the race detector slows memory-bound test work several times, so the
// soak keeps its largest buffers smaller under it.
const raceEnabled = true
