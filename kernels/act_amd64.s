//go:build !purego

#include "textflag.h"

// Vectorised exp for the elementwise kernels (AVX-512F): Cephes expf. x is clamped to
// [-87.3, 88.7], n = round(x·log2e), r = x - n·ln2 (in two parts), exp(r) by a degree-6
// polynomial, then VSCALEFPS multiplies by 2^n. Within 2 ulp of the correctly rounded result.
//
// EXP_CONSTS loads the constants into Z20..Z31 (clamps, log2e, ln2 in two parts, p0..p5, 1); EXP(in, out, t) leaves exp(in) in out (in is
// clobbered, t is a temporary).
#define EXP_CONSTS \
	MOVL $0xc2aeac50, AX; VPBROADCASTD AX, Z20 \
	MOVL $0x42b17218, AX; VPBROADCASTD AX, Z21 \
	MOVL $0x3fb8aa3b, AX; VPBROADCASTD AX, Z22 \
	MOVL $0x3f318000, AX; VPBROADCASTD AX, Z23 \
	MOVL $0xb95e8083, AX; VPBROADCASTD AX, Z24 \
	MOVL $0x39506967, AX; VPBROADCASTD AX, Z25 \
	MOVL $0x3ab743ce, AX; VPBROADCASTD AX, Z26 \
	MOVL $0x3c088908, AX; VPBROADCASTD AX, Z27 \
	MOVL $0x3d2aa9c1, AX; VPBROADCASTD AX, Z28 \
	MOVL $0x3e2aaaaa, AX; VPBROADCASTD AX, Z29 \
	MOVL $0x3f000000, AX; VPBROADCASTD AX, Z30 \
	MOVL $0x3f800000, AX; VPBROADCASTD AX, Z31

#define EXP(in, out, t) \
	VMAXPS Z20, in, in \
	VMINPS Z21, in, in \
	VMULPS Z22, in, t \
	VRNDSCALEPS $0, t, t \
	VFNMADD231PS Z23, t, in \
	VFNMADD231PS Z24, t, in \
	VMOVAPS Z25, out \
	VFMADD213PS Z26, in, out \
	VFMADD213PS Z27, in, out \
	VFMADD213PS Z28, in, out \
	VFMADD213PS Z29, in, out \
	VFMADD213PS Z30, in, out \
	VMULPS in, in, Z19 \
	VFMADD213PS in, Z19, out \
	VADDPS Z31, out, out \
	VSCALEFPS t, out, out

// func expScaleSumAVX512(x *float32, n int, scale, sub float32, sum *[16]float32)
// x[i] = exp(x[i]·scale - sub) for i < n; *sum = the 16 lane sums. The last n mod 16 values
// are done under a mask.
TEXT ·expScaleSumAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS scale+16(FP), Z16
	VBROADCASTSS sub+20(FP), Z17
	MOVQ sum+24(FP), DI
	EXP_CONSTS
	VXORPS Z18, Z18, Z18
	MOVQ CX, BX
	ANDQ $15, BX
	SHRQ $4, CX
	JZ   tail
loop:
	VMOVUPS (SI), Z0
	VMULPS Z16, Z0, Z0
	VSUBPS Z17, Z0, Z0
	EXP(Z0, Z1, Z2)
	VMOVUPS Z1, (SI)
	VADDPS Z1, Z18, Z18
	ADDQ $64, SI
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
	VMULPS Z16, Z0, Z0
	VSUBPS Z17, Z0, Z0
	EXP(Z0, Z1, Z2)
	VMOVUPS Z1, K1, (SI)
	VADDPS Z1, Z18, K1, Z18
done:
	VMOVUPS Z18, (DI)
	VZEROUPPER
	RET

// func maxAVX512(x *float32, n int, out *[16]float32)
// *out = the 16 lane maxima of x[:n] (lanes that saw no value hold -Inf).
TEXT ·maxAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ out+16(FP), DI
	MOVL $0xff800000, AX
	VPBROADCASTD AX, Z0
	MOVQ CX, BX
	ANDQ $15, BX
	SHRQ $4, CX
	JZ   tail
loop:
	VMAXPS (SI), Z0, Z0
	ADDQ $64, SI
	DECQ CX
	JNZ  loop
tail:
	TESTQ BX, BX
	JZ    done
	VMOVAPS Z0, Z1
	MOVQ BX, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVUPS (SI), K1, Z1
	VMAXPS Z1, Z0, Z0
done:
	VMOVUPS Z0, (DI)
	VZEROUPPER
	RET

// func siluMulAVX512(dst, gate, up *float32, n int)
// dst[i] = gate[i]·up[i] / (1 + exp(-gate[i])) for i < n (n a multiple of 16).
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	EXP_CONSTS
	SHRQ $4, CX
	JZ   done
loop:
	VMOVUPS (SI), Z3
	VMULPS (DX), Z3, Z4
	VXORPS Z0, Z0, Z0
	VSUBPS Z3, Z0, Z0
	EXP(Z0, Z1, Z2)
	VADDPS Z31, Z1, Z1
	VDIVPS Z1, Z4, Z4
	VMOVUPS Z4, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  loop
done:
	VZEROUPPER
	RET
