package coll

import "time"

// The numbers that shape coll's behaviour, in one place.

// DefaultTimeout is the collective timeout when Config.Timeout is 0.
const DefaultTimeout = 60 * time.Second

// DefaultAbortGrace is how long a failing collective waits for its peers to acknowledge
// the abort when Config.AbortGrace is 0.
const DefaultAbortGrace = time.Second

// DefaultScratchCache is Config.ScratchCache's default.
const DefaultScratchCache = 256 << 20

// agreeRadix is the radix of the completion-agreement tree.
const agreeRadix = 8

// spinPolls is how many times a waiter polls, yielding in between, before it blocks:
// completions of a short collective come within a few scheduler rounds, and blocking
// costs a wake-up; with many ranks on few cores, spinning longer starves the peers.
const spinPolls = 8
