package mem_test

import (
	"sync"
	"testing"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/stretchr/testify/require"
)

// TestGettersRaceClose: a buffer's getters racing two Closes are no data race (run under
// -race): Close no longer clears the fields the getters read after their closed check.
// Using a slice that Bytes returned after Close remains the caller's error.
func TestGettersRaceClose(t *testing.T) {
	for _, typ := range []mem.Type{mem.Host, mem.Sim} {
		for range 100 {
			b, err := mem.Alloc(typ, 4096)
			require.NoError(t, err)
			var wg sync.WaitGroup
			wg.Add(3)
			go func() { defer wg.Done(); _, _, _ = b.Bytes(), b.Addr(), b.Region() }()
			for range 2 {
				go func() { defer wg.Done(); require.NoError(t, b.Close()) }()
			}
			wg.Wait()
			require.Nil(t, b.Bytes(), "%v: Bytes after Close", typ)
			require.Nil(t, b.Region(), "%v: Region after Close", typ)
		}
	}
}
