// Package xknob reads the IBCOLL_X_* knobs of the diagnosis build (-tags
// ibcoll_stagetrace), which only experiments set. A knob that is set is said on
// stderr, so a run shows what it ran with; a malformed one ends the process with a
// message naming it, since an experiment that silently ran the defaults measures the
// wrong thing. Normal builds never import this package.
package xknob

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// exit ends the process; tests replace it.
var exit = os.Exit

// Int reads name as an integer of at least least; ok is false when it is unset.
func Int(name string, least int) (v int, ok bool) {
	s := strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < least {
		fmt.Fprintf(os.Stderr, "ibcoll diagnosis build: $%s is %q, want an integer >= %d\n", name, s, least)
		exit(2)
		return 0, false
	}
	fmt.Fprintf(os.Stderr, "ibcoll diagnosis build: $%s=%d\n", name, v)
	return v, true
}

// Bool reads name as 0 or 1 (or another strconv.ParseBool spelling); unset is false.
func Bool(name string) bool {
	s := strings.TrimSpace(os.Getenv(name))
	if s == "" {
		return false
	}
	on, err := strconv.ParseBool(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ibcoll diagnosis build: $%s is %q, want 1 or 0\n", name, s)
		exit(2)
		return false
	}
	fmt.Fprintf(os.Stderr, "ibcoll diagnosis build: $%s=%v\n", name, on)
	return on
}
