package reduce

import (
	"fmt"
	"unsafe"

	"github.com/ibcoll/ibcoll/collective"
)

// Into computes dst[i] = dst[i] op src[i] for every element. dst and src hold the
// same whole number of elements of dt; src may be dst itself but may not partly
// overlap it. Avg sums; Finalize divides.
func Into(dst, src []byte, dt collective.DType, op collective.Op) error {
	if err := checkOp("Into", op, dt); err != nil {
		return err
	}
	sz := dt.Size()
	if len(dst) != len(src) || len(dst)%sz != 0 {
		return invalid("Into", "dst has %d bytes, src %d: want equal multiples of %d (%v)", len(dst), len(src), sz, dt)
	}
	if len(dst) == 0 {
		return nil
	}
	if overlap(dst, src) && !same(dst, src) {
		return invalid("Into", "src partly overlaps dst")
	}
	srcs := [2][]byte{dst, src}
	run(dst, srcs[:], dt, op)
	return nil
}

// IntoMany computes dst[i] = srcs[0][i] op srcs[1][i] op ... in one pass, folding
// from the left: memory sees every source read once and dst written once. Every
// source holds as many bytes as dst, a whole number of elements of dt. dst may be
// srcs[0] itself; it may not overlap any other source. With one source it copies.
// float16 and bfloat16 are folded in float32 and rounded once.
func IntoMany(dst []byte, srcs [][]byte, dt collective.DType, op collective.Op) error {
	if err := checkMany("IntoMany", dst, srcs, dt, op); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	if len(srcs) == 1 {
		if !same(dst, srcs[0]) {
			copy(dst, srcs[0])
		}
		return nil
	}
	run(dst, srcs, dt, op)
	return nil
}

// checkMany checks IntoMany's (and Reference's) arguments, naming fn.
func checkMany(fn string, dst []byte, srcs [][]byte, dt collective.DType, op collective.Op) error {
	if err := checkOp(fn, op, dt); err != nil {
		return err
	}
	sz := dt.Size()
	if len(dst)%sz != 0 {
		return invalid(fn, "dst has %d bytes: want a multiple of %d (%v)", len(dst), sz, dt)
	}
	if len(srcs) == 0 {
		return invalid(fn, "srcs is empty: want at least one source")
	}
	for i, s := range srcs {
		if len(s) != len(dst) {
			return invalid(fn, "srcs[%d] has %d bytes, dst %d: want equal lengths", i, len(s), len(dst))
		}
		if i == 0 && same(dst, s) {
			continue
		}
		if overlap(dst, s) {
			if i == 0 {
				return invalid(fn, "srcs[0] partly overlaps dst (it may be dst itself)")
			}
			return invalid(fn, "srcs[%d] overlaps dst (only srcs[0] may be dst)", i)
		}
	}
	return nil
}

// run folds srcs into dst with the selected kernel, or the reference where the
// kernel does not apply. More sources than one native call takes are folded a
// group at a time into dst (the same left fold), except for half precision, whose
// single rounding needs them all in one pass: the reference takes those.
func run(dst []byte, srcs [][]byte, dt collective.DType, op collective.Op) {
	if len(dst) >= minNative {
		if len(srcs) <= maxSources {
			if native(level, dst, srcs, dt, op) {
				return
			}
		} else if dt != collective.Float16 && dt != collective.BFloat16 && native(level, dst, srcs[:maxSources], dt, op) {
			var group [maxSources][]byte
			group[0] = dst
			for rest := srcs[maxSources:]; len(rest) > 0; {
				m := copy(group[1:], rest)
				native(level, dst, group[:1+m], dt, op)
				rest = rest[m:]
			}
			return
		}
	}
	refInto(dst, srcs, dt, op)
}

// Finalize ends a reduction over n ranks: for collective.OpAvg it divides every element by n
// (integers truncate toward zero); other operators need nothing.
func Finalize(dst []byte, dt collective.DType, op collective.Op, n int) error {
	if divide, err := finalizing("Finalize", dst, dt, op, n); !divide {
		return err
	}
	if len(dst) >= minNative && nativeScale(level, dst, dt, n) {
		return nil
	}
	refScale(dst, dt, n)
	return nil
}

// finalizing checks Finalize's (and ReferenceFinalize's) arguments, naming fn, and
// says whether dst is to be divided by n.
func finalizing(fn string, dst []byte, dt collective.DType, op collective.Op, n int) (bool, error) {
	if err := checkOp(fn, op, dt); err != nil {
		return false, err
	}
	// The arguments are checked whatever the op: a call refused with one op or team
	// size must not pass with another.
	if n < 1 {
		return false, invalid(fn, "n is %d: a reduction is over at least one rank", n)
	}
	if len(dst)%dt.Size() != 0 {
		return false, invalid(fn, "dst is %d bytes, not a whole number of %v elements", len(dst), dt)
	}
	return op == collective.OpAvg && n > 1 && len(dst) > 0, nil
}

// same reports whether a and b are the same bytes.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// overlap reports whether a and b share a byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// checkOp is collective.CheckOp with the errors naming this package's arguments (op,
// dt) rather than a collective's (Args.Op, Args.DType).
func checkOp(fn string, op collective.Op, dt collective.DType) error {
	switch {
	case !op.Valid():
		return invalid(fn, "op is not a valid operator (%d)", uint8(op))
	case !dt.Valid():
		return invalid(fn, "dt is not a valid datatype (%d)", uint8(dt))
	case op.IsBitwise() && !dt.IsInteger():
		return invalid(fn, "op %v is bitwise and needs an integer dt, got %v", op, dt)
	}
	return nil
}

func invalid(op, format string, args ...any) error {
	return fmt.Errorf("reduce: %s: %s: %w", op, fmt.Sprintf(format, args...), collective.ErrInvalid)
}

// Kernels names the kernels this process runs, chosen once at start from the CPU's
// features: "go" (the reference loops: no cgo, another architecture), "base", "avx2",
// "avx512", "avx512bf16" or "avx512fp16" on amd64 ("avx512-half256" and
// "avx512bf16-half256" where float16 converts on 256-bit vectors, which CPUs that
// split 512-bit operations run faster), "neon" on arm64. Buffers below a
// few hundred bytes take the reference loops whatever it says. Tools print it beside
// reduction timings, which depend on it.
func Kernels() string { return levelNames[level] }
