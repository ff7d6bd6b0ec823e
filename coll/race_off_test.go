//go:build !race

package coll_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
