package mem_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/hostcopy"
	"github.com/ibcoll/ibcoll/mem"
)

var benchSizes = []struct {
	name string
	n    int
}{
	{"4KiB", 4 << 10},
	{"64KiB", 64 << 10},
	{"1MiB", 1 << 20},
	{"16MiB", 16 << 20},
	{"256MiB", 256 << 20},
	{"1GiB", 1 << 30},
}

func benchAlloc(b *testing.B, typ mem.Type, n int) *mem.Buffer {
	buf, err := mem.Alloc(typ, n)
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, buf.Close()) })
	if p := buf.Bytes(); p != nil {
		for i := range p {
			p[i] = byte(i * 7)
		}
	}
	return buf
}

// BenchmarkCopy times one copy per iteration; the async variant queues it on
// a Stream and synchronizes, so the two differ by the Stream's overhead. The
// host buffers are pageable, as user buffers are.
func BenchmarkCopy(b *testing.B) {
	for _, dir := range []struct {
		name     string
		dst, src mem.Type
	}{
		{"H2D", mem.CUDA, mem.Host},
		{"D2H", mem.Host, mem.CUDA},
		{"H2H", mem.Host, mem.Host},
		{"H2S", mem.Sim, mem.Host},
	} {
		cuda := isCUDA(dir.dst) || isCUDA(dir.src)
		for _, async := range []bool{false, true} {
			mode := "sync"
			if async {
				mode = "async"
			}
			for _, size := range benchSizes {
				b.Run(dir.name+"/"+mode+"/"+size.name, func(b *testing.B) {
					if cuda {
						requireCUDA(b)
					}
					src := benchAlloc(b, dir.src, size.n)
					dst := benchAlloc(b, dir.dst, size.n)
					var s *mem.Stream
					if async {
						s = newStream(b)
					}
					// The first copy faults the pages in; keep it out of the timing.
					require.NoError(b, mem.Copy(dst, 0, src, 0, size.n))
					b.SetBytes(int64(size.n))
					b.ReportAllocs()
					for b.Loop() {
						if async {
							if err := mem.CopyAsync(s, dst, 0, src, 0, size.n); err != nil {
								b.Fatal(err)
							}
							if err := s.Synchronize(); err != nil {
								b.Fatal(err)
							}
						} else if err := mem.Copy(dst, 0, src, 0, size.n); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkCopyPinned times what a staged collective's copy between pinned scratch and
// CUDA memory costs at the sizes where staging is furthest from its targets (issue 10:
// a 64 KiB gather of 8 ranks copies 512 KiB out at the root): one synchronous copy,
// and the same bytes as 8 copies queued on one stream and synchronized once (as a
// copy-out per landed block would be), in both directions. The dirty variants write
// the host side with the CPU before each copy (untimed), as the transport has just
// written a gather root's scratch when its copy-out starts: H2D-dirty with plain stores
// (the lines stay dirty in the CPU's cache), H2D-streamed with
// hostcopy.Stream's non-temporal stores, as soft0 writes pinned memory.
func BenchmarkCopyPinned(b *testing.B) {
	for _, dir := range []string{"H2D", "D2H", "H2D-dirty", "H2D-streamed"} {
		for _, split := range []int{1, 8} {
			for _, n := range []int{64 << 10, 512 << 10, 1 << 20, 8 << 20} {
				b.Run(fmt.Sprintf("%s/split%d/%dKiB", dir, split, n>>10), func(b *testing.B) {
					requireCUDA(b)
					host := benchAlloc(b, mem.Host, n)
					require.NoError(b, host.Pin())
					dev := benchAlloc(b, mem.CUDA, n)
					dst, src := dev, host
					if dir == "D2H" {
						dst, src = host, dev
					}
					s := newStream(b)
					require.NoError(b, mem.Copy(dst, 0, src, 0, n))
					b.SetBytes(int64(n))
					dirty, streamed := dir == "H2D-dirty", dir == "H2D-streamed"
					fresh := make([]byte, n)
					for b.Loop() {
						if dirty || streamed {
							b.StopTimer()
							p := host.Bytes()
							if streamed { // non-temporal stores: no line of p is left in a CPU cache
								for i := range fresh {
									fresh[i]++
								}
								hostcopy.Stream(p, fresh)
							} else {
								for i := range p {
									p[i]++
								}
							}
							b.StartTimer()
						}
						if split == 1 {
							if err := mem.Copy(dst, 0, src, 0, n); err != nil {
								b.Fatal(err)
							}
							continue
						}
						for i := 0; i < split; i++ {
							off := i * n / split
							if err := mem.CopyAsync(s, dst, off, src, off, n/split); err != nil {
								b.Fatal(err)
							}
						}
						if err := s.Synchronize(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
