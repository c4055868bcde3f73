//go:build !purego

#include "textflag.h"

// func sumSquaresAVX512(x *float32, n int, lanes *[16]float32)
// *lanes = 16 partial sums of x[i]² over x[:n] (tail under a mask), two accumulators deep.
TEXT ·sumSquaresAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	MOVQ CX, BX
	ANDQ $15, BX
	SHRQ $4, CX
	JZ   tail
	TESTQ $1, CX
	JZ   pairs
	VMOVUPS (SI), Z2
	VFMADD231PS Z2, Z2, Z0
	ADDQ $64, SI
	DECQ CX
	JZ   tail
pairs:
	VMOVUPS (SI), Z2
	VMOVUPS 64(SI), Z3
	VFMADD231PS Z2, Z2, Z0
	VFMADD231PS Z3, Z3, Z1
	ADDQ $128, SI
	SUBQ $2, CX
	JNZ  pairs
tail:
	TESTQ BX, BX
	JZ    done
	MOVQ BX, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z2
	VFMADD231PS Z2, Z2, Z0
done:
	VADDPS Z1, Z0, Z0
	VMOVUPS Z0, (DI)
	VZEROUPPER
	RET

// func scaleMulAVX512(dst, x, w *float32, n int, s float32)
// dst[i] = x[i]·s·w[i] for i < n (tail under a mask).
TEXT ·scaleMulAVX512(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Z4
	MOVQ CX, BX
	ANDQ $15, BX
	SHRQ $4, CX
	JZ   tail
loop:
	VMULPS (SI), Z4, Z0
	VMULPS (DX), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  loop
tail:
	TESTQ BX, BX
	JZ    done
	MOVQ BX, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (DX), K1, Z1
	VMULPS Z4, Z0, Z0
	VMULPS Z1, Z0, Z0
	VMOVUPS Z0, K1, (DI)
done:
	VZEROUPPER
	RET

// func sumSquaresAVX2(x *float32, n int, lanes *[8]float32)
// *lanes = the 8 lane sums of x[i]² for i < n (a multiple of 8): blocks of 8 alternate between
// two FMA chains (the first alone when the count of blocks is odd), added at the end.
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	SHRQ $3, CX
	JZ   done
	TESTQ $1, CX
	JZ   pairs
	VMOVUPS (SI), Y2
	VFMADD231PS Y2, Y2, Y0
	ADDQ $32, SI
	DECQ CX
	JZ   done
pairs:
	VMOVUPS (SI), Y2
	VMOVUPS 32(SI), Y3
	VFMADD231PS Y2, Y2, Y0
	VFMADD231PS Y3, Y3, Y1
	ADDQ $64, SI
	SUBQ $2, CX
	JNZ  pairs
done:
	VADDPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET

// func scaleMulAVX2(dst, x, w *float32, n int, s float32)
// dst[i] = (x[i]·s)·w[i] for i < n (a multiple of 8).
TEXT ·scaleMulAVX2(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Y4
	SHRQ $3, CX
	JZ   done
loop:
	VMULPS (SI), Y4, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  loop
done:
	VZEROUPPER
	RET
