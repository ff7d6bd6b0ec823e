package verbs_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/verbs"
)

// above returns "verbs/<this file>:<line>" for the line above its caller:
// where the object created there must be reported.
func above() string {
	_, file, line, _ := runtime.Caller(1)
	return fmt.Sprintf("verbs/%s:%d", filepath.Base(file), line-1)
}

// TestCheckLeaksNamesCreator: a leak report names every open object's
// kind and the line that created it, through each constructor (RegMR and
// RegMRAddr share a helper, so they are the ones a wrong frame count
// would blame on verbs itself).
func TestCheckLeaksNamesCreator(t *testing.T) {
	require.NoError(t, verbs.CheckLeaks(), "nothing is open between tests")
	mem := make([]byte, 64)
	var want []string
	var objs []interface{ Close() error }
	add := func(o interface{ Close() error }, err error, kind, site string) {
		t.Helper()
		require.NoError(t, err)
		objs = append(objs, o)
		want = append(want, kind+" created at "+site)
	}

	ctx, err := verbs.Open(verbs.SoftDeviceName)
	add(ctx, err, "context", above())
	pd, err := ctx.AllocPD()
	add(pd, err, "pd", above())
	cq, err := ctx.CreateCQ(4)
	add(cq, err, "cq", above())
	dm, err := ctx.AllocDM(64)
	add(dm, err, "dm", above())
	mr, err := pd.RegMR(mem, verbs.AccessLocalWrite)
	add(mr, err, "mr", above())
	mr, err = pd.RegMRAddr(uintptr(unsafe.Pointer(&mem[0])), len(mem), verbs.AccessLocalWrite)
	add(mr, err, "mr", above())
	mr, err = pd.RegDMMR(dm, 0, 64, verbs.AccessLocalWrite)
	add(mr, err, "mr", above())
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 1})
	add(qp, err, "qp", above())

	err = verbs.CheckLeaks()
	require.Error(t, err)
	msg := err.Error()
	t.Log(msg)
	require.Contains(t, msg, fmt.Sprintf("%d leaked objects", len(objs)))
	for _, w := range want {
		require.Contains(t, msg, "1 "+w)
	}
	require.Equal(t, map[string]int{"context": 1, "pd": 1, "cq": 1, "dm": 1, "mr": 3, "qp": 1}, verbs.LiveObjects())

	for i := len(objs) - 1; i >= 0; i-- {
		require.NoError(t, objs[i].Close())
		if i > 0 {
			require.NotContains(t, verbs.CheckLeaks().Error(), want[i], "a closed object is no longer reported")
		}
	}
	require.NoError(t, verbs.CheckLeaks())
	require.Empty(t, verbs.LiveObjects())
}
