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
	VMAXPS in, Z20, in \
	VMINPS in, Z21, in \
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

// AVX2 + FMA versions of the same kernels, for CPUs without AVX-512 (Zen 2/3, older Xeons):
// eight lanes, the same Cephes polynomial and constants, which live in memory (AVX2 has 16
// registers and no embedded broadcast). AVX2 has no VSCALEFPS: 2^n is built in the exponent
// field as two factors 2^⌊n/2⌋ · 2^(n-⌊n/2⌋), each a normal number for every clamped n in
// [-126, 128], so the product rounds once, as VSCALEFPS does. n is a multiple of 8 for all
// three; the callers send tails through a padded copy.

DATA expLo<>+0(SB)/4, $0xc2aeac50
DATA expLo<>+4(SB)/4, $0xc2aeac50
DATA expLo<>+8(SB)/4, $0xc2aeac50
DATA expLo<>+12(SB)/4, $0xc2aeac50
DATA expLo<>+16(SB)/4, $0xc2aeac50
DATA expLo<>+20(SB)/4, $0xc2aeac50
DATA expLo<>+24(SB)/4, $0xc2aeac50
DATA expLo<>+28(SB)/4, $0xc2aeac50
GLOBL expLo<>(SB), RODATA|NOPTR, $32

DATA expHi<>+0(SB)/4, $0x42b17218
DATA expHi<>+4(SB)/4, $0x42b17218
DATA expHi<>+8(SB)/4, $0x42b17218
DATA expHi<>+12(SB)/4, $0x42b17218
DATA expHi<>+16(SB)/4, $0x42b17218
DATA expHi<>+20(SB)/4, $0x42b17218
DATA expHi<>+24(SB)/4, $0x42b17218
DATA expHi<>+28(SB)/4, $0x42b17218
GLOBL expHi<>(SB), RODATA|NOPTR, $32

DATA expLog2e<>+0(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+4(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+8(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+12(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+16(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+20(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+24(SB)/4, $0x3fb8aa3b
DATA expLog2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL expLog2e<>(SB), RODATA|NOPTR, $32

DATA expLn2Hi<>+0(SB)/4, $0x3f318000
DATA expLn2Hi<>+4(SB)/4, $0x3f318000
DATA expLn2Hi<>+8(SB)/4, $0x3f318000
DATA expLn2Hi<>+12(SB)/4, $0x3f318000
DATA expLn2Hi<>+16(SB)/4, $0x3f318000
DATA expLn2Hi<>+20(SB)/4, $0x3f318000
DATA expLn2Hi<>+24(SB)/4, $0x3f318000
DATA expLn2Hi<>+28(SB)/4, $0x3f318000
GLOBL expLn2Hi<>(SB), RODATA|NOPTR, $32

DATA expLn2Lo<>+0(SB)/4, $0xb95e8083
DATA expLn2Lo<>+4(SB)/4, $0xb95e8083
DATA expLn2Lo<>+8(SB)/4, $0xb95e8083
DATA expLn2Lo<>+12(SB)/4, $0xb95e8083
DATA expLn2Lo<>+16(SB)/4, $0xb95e8083
DATA expLn2Lo<>+20(SB)/4, $0xb95e8083
DATA expLn2Lo<>+24(SB)/4, $0xb95e8083
DATA expLn2Lo<>+28(SB)/4, $0xb95e8083
GLOBL expLn2Lo<>(SB), RODATA|NOPTR, $32

DATA expP0<>+0(SB)/4, $0x39506967
DATA expP0<>+4(SB)/4, $0x39506967
DATA expP0<>+8(SB)/4, $0x39506967
DATA expP0<>+12(SB)/4, $0x39506967
DATA expP0<>+16(SB)/4, $0x39506967
DATA expP0<>+20(SB)/4, $0x39506967
DATA expP0<>+24(SB)/4, $0x39506967
DATA expP0<>+28(SB)/4, $0x39506967
GLOBL expP0<>(SB), RODATA|NOPTR, $32

DATA expP1<>+0(SB)/4, $0x3ab743ce
DATA expP1<>+4(SB)/4, $0x3ab743ce
DATA expP1<>+8(SB)/4, $0x3ab743ce
DATA expP1<>+12(SB)/4, $0x3ab743ce
DATA expP1<>+16(SB)/4, $0x3ab743ce
DATA expP1<>+20(SB)/4, $0x3ab743ce
DATA expP1<>+24(SB)/4, $0x3ab743ce
DATA expP1<>+28(SB)/4, $0x3ab743ce
GLOBL expP1<>(SB), RODATA|NOPTR, $32

DATA expP2<>+0(SB)/4, $0x3c088908
DATA expP2<>+4(SB)/4, $0x3c088908
DATA expP2<>+8(SB)/4, $0x3c088908
DATA expP2<>+12(SB)/4, $0x3c088908
DATA expP2<>+16(SB)/4, $0x3c088908
DATA expP2<>+20(SB)/4, $0x3c088908
DATA expP2<>+24(SB)/4, $0x3c088908
DATA expP2<>+28(SB)/4, $0x3c088908
GLOBL expP2<>(SB), RODATA|NOPTR, $32

DATA expP3<>+0(SB)/4, $0x3d2aa9c1
DATA expP3<>+4(SB)/4, $0x3d2aa9c1
DATA expP3<>+8(SB)/4, $0x3d2aa9c1
DATA expP3<>+12(SB)/4, $0x3d2aa9c1
DATA expP3<>+16(SB)/4, $0x3d2aa9c1
DATA expP3<>+20(SB)/4, $0x3d2aa9c1
DATA expP3<>+24(SB)/4, $0x3d2aa9c1
DATA expP3<>+28(SB)/4, $0x3d2aa9c1
GLOBL expP3<>(SB), RODATA|NOPTR, $32

DATA expP4<>+0(SB)/4, $0x3e2aaaaa
DATA expP4<>+4(SB)/4, $0x3e2aaaaa
DATA expP4<>+8(SB)/4, $0x3e2aaaaa
DATA expP4<>+12(SB)/4, $0x3e2aaaaa
DATA expP4<>+16(SB)/4, $0x3e2aaaaa
DATA expP4<>+20(SB)/4, $0x3e2aaaaa
DATA expP4<>+24(SB)/4, $0x3e2aaaaa
DATA expP4<>+28(SB)/4, $0x3e2aaaaa
GLOBL expP4<>(SB), RODATA|NOPTR, $32

DATA expP5<>+0(SB)/4, $0x3f000000
DATA expP5<>+4(SB)/4, $0x3f000000
DATA expP5<>+8(SB)/4, $0x3f000000
DATA expP5<>+12(SB)/4, $0x3f000000
DATA expP5<>+16(SB)/4, $0x3f000000
DATA expP5<>+20(SB)/4, $0x3f000000
DATA expP5<>+24(SB)/4, $0x3f000000
DATA expP5<>+28(SB)/4, $0x3f000000
GLOBL expP5<>(SB), RODATA|NOPTR, $32

DATA expOne<>+0(SB)/4, $0x3f800000
DATA expOne<>+4(SB)/4, $0x3f800000
DATA expOne<>+8(SB)/4, $0x3f800000
DATA expOne<>+12(SB)/4, $0x3f800000
DATA expOne<>+16(SB)/4, $0x3f800000
DATA expOne<>+20(SB)/4, $0x3f800000
DATA expOne<>+24(SB)/4, $0x3f800000
DATA expOne<>+28(SB)/4, $0x3f800000
GLOBL expOne<>(SB), RODATA|NOPTR, $32

DATA exp127<>+0(SB)/4, $0x0000007f
DATA exp127<>+4(SB)/4, $0x0000007f
DATA exp127<>+8(SB)/4, $0x0000007f
DATA exp127<>+12(SB)/4, $0x0000007f
DATA exp127<>+16(SB)/4, $0x0000007f
DATA exp127<>+20(SB)/4, $0x0000007f
DATA exp127<>+24(SB)/4, $0x0000007f
DATA exp127<>+28(SB)/4, $0x0000007f
GLOBL exp127<>(SB), RODATA|NOPTR, $32

DATA negInf<>+0(SB)/4, $0xff800000
DATA negInf<>+4(SB)/4, $0xff800000
DATA negInf<>+8(SB)/4, $0xff800000
DATA negInf<>+12(SB)/4, $0xff800000
DATA negInf<>+16(SB)/4, $0xff800000
DATA negInf<>+20(SB)/4, $0xff800000
DATA negInf<>+24(SB)/4, $0xff800000
DATA negInf<>+28(SB)/4, $0xff800000
GLOBL negInf<>(SB), RODATA|NOPTR, $32

// laneMask: 8 lanes of ones, then 8 of zeros; the mask of the first r lanes is the 8 words
// from laneMask+4·(8−r).
DATA laneMask<>+0(SB)/4, $0xffffffff
DATA laneMask<>+4(SB)/4, $0xffffffff
DATA laneMask<>+8(SB)/4, $0xffffffff
DATA laneMask<>+12(SB)/4, $0xffffffff
DATA laneMask<>+16(SB)/4, $0xffffffff
DATA laneMask<>+20(SB)/4, $0xffffffff
DATA laneMask<>+24(SB)/4, $0xffffffff
DATA laneMask<>+28(SB)/4, $0xffffffff
DATA laneMask<>+32(SB)/4, $0x00000000
DATA laneMask<>+36(SB)/4, $0x00000000
DATA laneMask<>+40(SB)/4, $0x00000000
DATA laneMask<>+44(SB)/4, $0x00000000
DATA laneMask<>+48(SB)/4, $0x00000000
DATA laneMask<>+52(SB)/4, $0x00000000
DATA laneMask<>+56(SB)/4, $0x00000000
DATA laneMask<>+60(SB)/4, $0x00000000
GLOBL laneMask<>(SB), RODATA|NOPTR, $64

// EXP8(in, out, t, s) leaves exp(in) in out (in is clobbered; t and s are temporaries).
#define EXP8(in, out, t, s) \
	VMOVUPS expLo<>(SB), t \
	VMAXPS in, t, in \
	VMOVUPS expHi<>(SB), t \
	VMINPS in, t, in \
	VMULPS expLog2e<>(SB), in, t \
	VROUNDPS $0, t, t \
	VFNMADD231PS expLn2Hi<>(SB), t, in \
	VFNMADD231PS expLn2Lo<>(SB), t, in \
	VMOVUPS expP0<>(SB), out \
	VFMADD213PS expP1<>(SB), in, out \
	VFMADD213PS expP2<>(SB), in, out \
	VFMADD213PS expP3<>(SB), in, out \
	VFMADD213PS expP4<>(SB), in, out \
	VFMADD213PS expP5<>(SB), in, out \
	VMULPS in, in, s \
	VFMADD213PS in, s, out \
	VADDPS expOne<>(SB), out, out \
	VCVTPS2DQ t, t \
	VPSRAD $1, t, s \
	VPSUBD s, t, t \
	VPADDD exp127<>(SB), s, s \
	VPSLLD $23, s, s \
	VPADDD exp127<>(SB), t, t \
	VPSLLD $23, t, t \
	VMULPS s, out, out \
	VMULPS t, out, out

// LANEMASK(n, tmp, mask) loads into mask the lane mask of the first n lanes (0 < n < 8) from
// laneMask (clobbering n and tmp): for the last n mod 8 values of a row, under VMASKMOVPS.
#define LANEMASK(n, tmp, mask) \
	LEAQ laneMask<>+32(SB), tmp \
	SHLQ $2, n \
	SUBQ n, tmp \
	VMOVUPS (tmp), mask

// func expScaleSumAVX2(x *float32, n int, scale, sub float32, sum *[8]float32)
// x[i] = exp(x[i]·scale - sub) for i < n; *sum = the 8 lane sums of the first n &^ 7 values.
// The last n mod 8 values are done under a mask (VMASKMOVPS: the lanes past n are neither read
// nor written) and left out of the sums: the caller adds them in order, as it did when they
// went through a padded copy, so the bits are those of that copy.
TEXT ·expScaleSumAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS scale+16(FP), Y6
	VBROADCASTSS sub+20(FP), Y7
	MOVQ sum+24(FP), DI
	VXORPS Y8, Y8, Y8
	MOVQ CX, BX
	ANDQ $7, BX
	SHRQ $3, CX
	JZ   tail
loop:
	VMOVUPS (SI), Y0
	VMULPS Y6, Y0, Y0
	VSUBPS Y7, Y0, Y0
	EXP8(Y0, Y1, Y2, Y3)
	VMOVUPS Y1, (SI)
	VADDPS Y1, Y8, Y8
	ADDQ $32, SI
	DECQ CX
	JNZ  loop
tail:
	TESTQ BX, BX
	JZ    done
	LANEMASK(BX, AX, Y9)
	VMASKMOVPS (SI), Y9, Y0
	VMULPS Y6, Y0, Y0
	VSUBPS Y7, Y0, Y0
	EXP8(Y0, Y1, Y2, Y3)
	VMASKMOVPS Y1, Y9, (SI)
done:
	VMOVUPS Y8, (DI)
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) float32
// The largest value of x[:n] (-Inf for n = 0): 8 lanes, the last n mod 8 values under a mask
// (lanes past n read as -Inf), then the lanes reduced in the register.
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS negInf<>(SB), Y0
	MOVQ CX, BX
	ANDQ $7, BX
	SHRQ $3, CX
	JZ   tail
loop:
	VMAXPS (SI), Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JNZ  loop
tail:
	TESTQ BX, BX
	JZ    reduce
	LANEMASK(BX, AX, Y9)
	VMASKMOVPS (SI), Y9, Y1
	VANDNPS negInf<>(SB), Y9, Y2
	VORPS Y2, Y1, Y1
	VMAXPS Y1, Y0, Y0
reduce:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func siluMulAVX2(dst, gate, up *float32, n int)
// dst[i] = gate[i]·up[i] / (1 + exp(-gate[i])) for i < n (a multiple of 8).
TEXT ·siluMulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   done
loop:
	VMOVUPS (SI), Y5
	VMULPS (DX), Y5, Y4
	VXORPS Y0, Y0, Y0
	VSUBPS Y5, Y0, Y0
	EXP8(Y0, Y1, Y2, Y3)
	VADDPS expOne<>(SB), Y1, Y1
	VDIVPS Y1, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  loop
done:
	VZEROUPPER
	RET

// func mixAVX2(dst, x *float32, n int, a, b float32)
// dst[i] = a·dst[i] + b·x[i] for i < n (a multiple of 8): two rounded products and a rounded
// sum, no FMA, so the bits are those of the scalar reference.
TEXT ·mixAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS a+24(FP), Y0
	VBROADCASTSS b+28(FP), Y1
	SHRQ $3, CX
	JZ   done
loop:
	VMULPS (DI), Y0, Y2
	VMULPS (SI), Y1, Y3
	VADDPS Y3, Y2, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JNZ  loop
done:
	VZEROUPPER
	RET

// func scaleAVX2(dst, x *float32, n int, s float32)
// dst[i] = s·x[i] for i < n (a multiple of 8).
TEXT ·scaleAVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS s+24(FP), Y0
	SHRQ $3, CX
	JZ   done
loop:
	VMULPS (SI), Y0, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JNZ  loop
done:
	VZEROUPPER
	RET
