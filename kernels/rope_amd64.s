//go:build !purego

#include "textflag.h"

// func ropeAVX512(x, cos, sin *float32, half, heads int)
// Rotates heads consecutive heads of 2·half values at x by the angles whose cos/sin are given
// (half values each): a' = a·c - b·s, b' = b·c + a·s for a = x[i], b = x[i+half]. The last
// half mod 16 values of each half are done under a mask.
TEXT ·ropeAVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), DI
	MOVQ cos+8(FP), R8
	MOVQ sin+16(FP), R9
	MOVQ half+24(FP), R10
	MOVQ heads+32(FP), R11
	TESTQ R11, R11
	JZ    done
	MOVQ R10, BX
	ANDQ $15, BX
	MOVQ BX, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	MOVQ R10, R12
	SHLQ $2, R12
head:
	LEAQ (DI)(R12*1), SI
	XORQ DX, DX
	MOVQ R10, CX
	SHRQ $4, CX
	JZ   tail
blk:
	VMOVUPS (DI)(DX*1), Z0
	VMOVUPS (SI)(DX*1), Z1
	VMOVUPS (R8)(DX*1), Z2
	VMOVUPS (R9)(DX*1), Z3
	VMULPS Z2, Z0, Z4
	VFNMADD231PS Z3, Z1, Z4
	VMULPS Z2, Z1, Z5
	VFMADD231PS Z3, Z0, Z5
	VMOVUPS Z4, (DI)(DX*1)
	VMOVUPS Z5, (SI)(DX*1)
	ADDQ $64, DX
	DECQ CX
	JNZ  blk
tail:
	TESTQ BX, BX
	JZ    next
	VMOVUPS.Z (DI)(DX*1), K1, Z0
	VMOVUPS.Z (SI)(DX*1), K1, Z1
	VMOVUPS.Z (R8)(DX*1), K1, Z2
	VMOVUPS.Z (R9)(DX*1), K1, Z3
	VMULPS Z2, Z0, Z4
	VFNMADD231PS Z3, Z1, Z4
	VMULPS Z2, Z1, Z5
	VFMADD231PS Z3, Z0, Z5
	VMOVUPS Z4, K1, (DI)(DX*1)
	VMOVUPS Z5, K1, (SI)(DX*1)
next:
	LEAQ (DI)(R12*2), DI
	DECQ R11
	JNZ  head
done:
	VZEROUPPER
	RET

// func ropeAVX2(x, cos, sin *float32, half, heads int)
// ropeAVX512's rotation with 8 lanes; half must be a multiple of 8.
TEXT ·ropeAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), DI
	MOVQ cos+8(FP), R8
	MOVQ sin+16(FP), R9
	MOVQ half+24(FP), R10
	MOVQ heads+32(FP), R11
	TESTQ R11, R11
	JZ    done
	MOVQ R10, R12
	SHLQ $2, R12
head:
	LEAQ (DI)(R12*1), SI
	XORQ DX, DX
	MOVQ R10, CX
	SHRQ $3, CX
	JZ   next
blk:
	VMOVUPS (DI)(DX*1), Y0
	VMOVUPS (SI)(DX*1), Y1
	VMOVUPS (R8)(DX*1), Y2
	VMOVUPS (R9)(DX*1), Y3
	VMULPS Y2, Y0, Y4
	VFNMADD231PS Y3, Y1, Y4
	VMULPS Y2, Y1, Y5
	VFMADD231PS Y3, Y0, Y5
	VMOVUPS Y4, (DI)(DX*1)
	VMOVUPS Y5, (SI)(DX*1)
	ADDQ $32, DX
	DECQ CX
	JNZ  blk
next:
	LEAQ (DI)(R12*2), DI
	DECQ R11
	JNZ  head
done:
	VZEROUPPER
	RET
