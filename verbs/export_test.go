package verbs

import "time"

// SetPullWait sets how long soft0's writer offers a write to its owner
// (soft_pull.go) and returns the value before.
func SetPullWait(d time.Duration) time.Duration {
	return time.Duration(pullWait.Swap(int64(d)))
}

// FailNextConnect makes the next Connect fail at its last step, once (connectFault).
func FailNextConnect() { failConnect.Store(true) }
