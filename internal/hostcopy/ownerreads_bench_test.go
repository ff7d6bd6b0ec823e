//go:build linux

package hostcopy

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkWriteOwnerReads is soft0's write into memory whose owner reads it next (a
// reduce root's scratch): a goroutine on CPU 1 writes n bytes into dst, then one on
// CPU 0 reads all of dst, in turns. write-ns is the write alone, per round: with plain
// stores each line is first taken from the reader's cache (docs/design.md, "Writes
// that the owner reads"). The reading-nobody baseline is BenchmarkCopy.
func BenchmarkWriteOwnerReads(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs two CPUs: the writer and the reader on different cores")
	}
	for _, n := range []int{64 << 10, 256 << 10, 1 << 20} {
		for _, w := range []struct {
			name string
			fn   func(dst, src []byte) int
		}{{"copy", Copy}, {"stream", Stream}} {
			b.Run(fmt.Sprintf("%dK/%s", n>>10, w.name), func(b *testing.B) {
				src, dst := make([]byte, n), make([]byte, n)
				for i := range src {
					src[i] = byte(i)
				}
				var turn atomic.Int64 // 2i: round i's write; 2i+1: its read
				rounds := int64(b.N)
				var wrote time.Duration
				done := make(chan struct{})
				go func() {
					defer close(done)
					restore, err := onCPU(1)
					if err != nil {
						b.Logf("writer not pinned to CPU 1: %v", err)
					}
					defer restore()
					for i := int64(0); i < rounds; i++ {
						for turn.Load() != 2*i {
						}
						t := time.Now()
						w.fn(dst, src)
						wrote += time.Since(t)
						turn.Store(2*i + 1)
					}
				}()
				restore, err := onCPU(0)
				if err != nil {
					b.Logf("reader not pinned to CPU 0: %v", err)
				}
				defer restore()
				var sink uint64
				b.SetBytes(int64(n))
				b.ResetTimer()
				for i := int64(0); i < rounds; i++ {
					for turn.Load() != 2*i+1 {
					}
					sink += sumWords(dst)
					turn.Store(2*i + 2)
				}
				b.StopTimer()
				<-done
				b.ReportMetric(float64(wrote.Nanoseconds())/float64(b.N), "write-ns")
				if sink == 1 {
					b.Log(sink)
				}
			})
		}
	}
}

// onCPU locks the goroutine to its thread and the thread to cpu; restore gives the
// thread its CPUs back and unlocks it. On an error the run goes on unpinned.
func onCPU(cpu int) (restore func(), err error) {
	runtime.LockOSThread()
	var old, s unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return runtime.UnlockOSThread, err
	}
	s.Set(cpu)
	restore = func() {
		_ = unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
	return restore, unix.SchedSetaffinity(0, &s)
}

func sumWords(p []byte) uint64 {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(p))), len(p)/8)
	var s uint64
	for _, x := range w {
		s += x
	}
	return s
}
