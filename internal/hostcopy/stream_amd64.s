#include "textflag.h"

// func stream64(dst, src unsafe.Pointer, n uintptr)
// Copies n bytes (a multiple of 64) with non-temporal stores; dst is 16-byte aligned.
// The SFENCE orders the stores before whatever the caller writes next (a completion).
TEXT ·stream64(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $6, CX
	JZ   done
loop:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVNTO X0, 0(DI)
	MOVNTO X1, 16(DI)
	MOVNTO X2, 32(DI)
	MOVNTO X3, 48(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop
	SFENCE
done:
	RET
