// Command gen writes ../gemm_amd64.s, the GEMM micro-kernels of package kernels.
//
// Run it from this folder: `go run . -out ../gemm_amd64.s`. It is a separate module so the main
// module never depends on it. The Go assembler does not know VDPBF16PS or VCVTNEPS2BF16, so those
// are emitted as BYTE directives; their EVEX encodings are computed here and, with -verify (the
// default), checked against GNU as + objdump when binutils is installed.
//
// Kernels (all ABI0, frame arguments, no stack):
//
//	gemmF32Avx512_<mr>(a, b, kc, c, ldc, mask, acc, pf)    mr = 1..12, tile mr×32, packed f32 A, f32 B
//	gemmW16Avx512_<mr>(...)                                f32 A, bf16 B (k-pair panels), widened in registers
//	gemmDotAvx512_<mr>(...)                                bf16 A pairs, bf16 B, VDPBF16PS; kc in pairs
//	gemmF32Avx2_<mr>(a, lda, b, kc, c, ldc, acc)           mr = 1..6, tile mr×16 (half a 32-column panel)
//	gemmW16Avx2_<mr>(...)                                  f32 A, bf16 B half panel
//	gemmF32Avx2W_<mr>, gemmW16Avx2W_<mr>(..., pf, pfHalf)   mr = 1..3, tile mr×32 (a whole panel)
//	peakF32Avx512(n), peakDotAvx512(n), peakF32Avx2(n)     register-resident FMA chains
//	cvtBF16Avx512(dst, src, n)                             n/16 blocks of 16 f32 → 16 bf16 (RNE)
//	packAF32Avx512(dst, src, lda, rows, kc)                one micro-tile of A into the f32 kernels' layout
//
// Panel layouts (see kernels/weight.go): f32 panel = [k][32] floats; bf16 panel = [k/2][32][2]
// uint16 (k-pairs interleaved per column), so a 64-byte load holds 16 columns × one k-pair. The
// f32 kernels read A packed per micro-tile: chunks of 16 k, each mr rows × 16 floats.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	out    = flag.String("out", "../gemm_amd64.s", "output assembly file")
	pfW16  = flag.Int("prefetch-w16", 1024, "bf16-weight kernel prefetch distance in bytes (0: none)")
	pfAvx2 = flag.Bool("prefetch-avx2", true, "AVX2 kernels prefetch the pf stream")
	pf512  = flag.Bool("prefetch-512-next", true, "AVX-512 bf16-weight kernels prefetch the pf stream (the block read next)")
	decl   = flag.String("decl", "../gemm_decl_amd64.go", "output Go declarations file")
	verify = flag.Bool("verify", true, "check BYTE encodings with GNU as + objdump when available")
)

// checks collects Intel-syntax instructions and the bytes we emitted for them.
var checks = map[string][]byte{}

type gen struct{ b bytes.Buffer }

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.b, format+"\n", args...) }

// evexRRR encodes an EVEX.512 reg,reg,reg instruction of map 0F38, W0.
// dst is ModRM.reg, src1 is EVEX.vvvv (or -1 when unused), src2 is ModRM.rm.
func evexRRR(pp, op byte, dst, src1, src2 int) []byte {
	inv := func(b int) byte { return byte(^b & 1) }
	p0 := inv(dst>>3)<<7 | inv(src2>>4)<<6 | inv(src2>>3)<<5 | inv(dst>>4)<<4 | 2
	v := 0
	if src1 >= 0 {
		v = src1
	}
	p1 := byte((^v)&15)<<3 | 1<<2 | pp
	var vp byte = 1
	if src1 >= 0 {
		vp = inv(v >> 4)
	}
	p2 := byte(0x40) | vp<<3
	modrm := byte(0xc0) | byte(dst&7)<<3 | byte(src2&7)
	return []byte{0x62, p0, p1, p2, op, modrm}
}

func byteDirective(b []byte) string {
	s := make([]string, len(b))
	for i, x := range b {
		s[i] = fmt.Sprintf("$0x%02x", x)
	}
	return "BYTE " + strings.Join(s, "; BYTE ")
}

// vdpbf16ps emits acc += Σpairs src1·src2 (zmm registers).
func (g *gen) vdpbf16ps(acc, src1, src2 int) {
	b := evexRRR(2, 0x52, acc, src1, src2)
	checks[fmt.Sprintf("vdpbf16ps zmm%d,zmm%d,zmm%d", acc, src1, src2)] = b
	g.p("\t%s // VDPBF16PS Z%d, Z%d, Z%d", byteDirective(b), src2, src1, acc)
}

// vcvtneps2bf16 emits ymm dst = bf16(zmm src).
func (g *gen) vcvtneps2bf16(dst, src int) {
	b := evexRRR(2, 0x72, dst, -1, src)
	checks[fmt.Sprintf("vcvtneps2bf16 ymm%d,zmm%d", dst, src)] = b
	g.p("\t%s // VCVTNEPS2BF16 Z%d, Y%d", byteDirective(b), src, dst)
}

// rowAddr returns the address of row i of A at byte displacement disp. Rows 0-3 hang off SI,
// 4-7 off R10, 8-11 off R11, with R8 = lda and R9 = 3·lda.
func rowAddr(i, disp int) string {
	base := []string{"SI", "R10", "R11"}[i/4]
	idx := []string{"", "(R8*1)", "(R8*2)", "(R9*1)"}[i%4]
	return fmt.Sprintf("%d(%s)%s", disp, base, idx)
}

// prologue loads the common arguments and sets up the row bases for mr rows.
func (g *gen) prologue(mr int) {
	g.p("\tMOVQ a+0(FP), SI")
	g.p("\tMOVQ lda+8(FP), R8")
	g.p("\tMOVQ b+16(FP), DX")
	g.p("\tMOVQ kc+24(FP), CX")
	g.p("\tLEAQ (R8)(R8*2), R9")
	if mr > 4 {
		g.p("\tLEAQ (SI)(R8*4), R10")
	}
	if mr > 8 {
		g.p("\tLEAQ (R10)(R8*4), R11")
	}
}

func (g *gen) advanceA(mr, bytes int) {
	g.p("\tADDQ $%d, SI", bytes)
	if mr > 4 {
		g.p("\tADDQ $%d, R10", bytes)
	}
	if mr > 8 {
		g.p("\tADDQ $%d, R11", bytes)
	}
}

// store512 writes the mr×32 accumulators Z0..Z(2mr-1) to C under masks K1 (columns 0-15) and
// K2 (16-31), adding C's old values when acc != 0.
func (g *gen) store512(name string, mr int) { g.store512At(name, mr, 32) }

// store512At is store512 for arguments c, ldc, mask and acc at frame offset off and on.
func (g *gen) store512At(name string, mr, off int) {
	g.p("\tMOVQ c+%d(FP), DI", off)
	g.p("\tMOVQ ldc+%d(FP), R12", off+8)
	g.p("\tMOVL mask+%d(FP), AX", off+16)
	g.p("\tKMOVW AX, K1")
	g.p("\tSHRL $16, AX")
	g.p("\tKMOVW AX, K2")
	g.p("\tMOVQ acc+%d(FP), BX", off+24)
	g.p("\tTESTQ BX, BX")
	g.p("\tJEQ %s_store", name)
	for i := 0; i < mr; i++ {
		g.p("\tVMOVUPS.Z (DI), K1, Z26")
		g.p("\tVMOVUPS.Z 64(DI), K2, Z27")
		g.p("\tVADDPS Z26, Z%d, Z%d", 2*i, 2*i)
		g.p("\tVADDPS Z27, Z%d, Z%d", 2*i+1, 2*i+1)
		g.p("\tVMOVUPS Z%d, K1, (DI)", 2*i)
		g.p("\tVMOVUPS Z%d, K2, 64(DI)", 2*i+1)
		if i < mr-1 {
			g.p("\tADDQ R12, DI")
		}
	}
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("%s_store:", name)
	for i := 0; i < mr; i++ {
		g.p("\tVMOVUPS Z%d, K1, (DI)", 2*i)
		g.p("\tVMOVUPS Z%d, K2, 64(DI)", 2*i+1)
		if i < mr-1 {
			g.p("\tADDQ R12, DI")
		}
	}
	g.p("\tVZEROUPPER")
	g.p("\tRET")
}

func (g *gen) zero512(mr int) {
	for i := 0; i < 2*mr; i++ {
		g.p("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
	}
}

const args512 = "$0-64"

// prefetchF32 is how far ahead (bytes of the B panel, 128 per k) the f32 kernel prefetches B
// into L1, where the panel streams from L2 once per micro-tile. It costs two load slots per k,
// which the kernel has to spare; without it the whole GEMM ran 1-3 % slower on the dev machine.
const prefetchF32 = 512

// prefetchF32L2 is the lines the f32 kernel prefetches into L2 per 16 k (PREFETCHT1, from its pf
// argument on, one stream): the Go side points it at the next cache block of B, or at the next
// micro-tile's packed A. Exported to the Go side as f32PrefetchPer16 (bytes).
const prefetchF32L2 = 8

// f32Avx512 is the FP32 kernel. A is a packed micro-panel (packA): chunks of 16 k, each mr rows
// × 16 floats, so row i of step j is at a fixed displacement off one register (rows 0-5 off SI,
// 6-11 off R10 = SI+384), no index register and no per-row pointer to advance. Per k: two
// 16-float loads of B, one broadcast of A per row into a register, two FMAs per row (24
// accumulators for 12 rows). A loop iteration is one 16-k chunk; a ragged kc ends with single
// steps. At the start the C tile is prefetched into L1 (it is read, or written, at the end), and
// every iteration prefetches prefetchF32L2 lines of the pf stream into L2.
func (g *gen) f32Avx512(mr int) {
	name := fmt.Sprintf("gemmF32Avx512_%d", mr)
	g.p("\n// func %s(a unsafe.Pointer, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, mask uint32, acc int, pf unsafe.Pointer)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, %s", name, args512)
	g.p("\tMOVQ a+0(FP), SI")
	g.p("\tMOVQ b+8(FP), DX")
	g.p("\tMOVQ kc+16(FP), CX")
	g.p("\tMOVQ pf+56(FP), R13")
	if mr > 6 {
		g.p("\tLEAQ 384(SI), R10")
	}
	g.p("\tMOVQ c+24(FP), DI")
	g.p("\tMOVQ ldc+32(FP), R12")
	for i := 0; i < mr; i++ {
		g.p("\tPREFETCHT0 (DI)")
		g.p("\tPREFETCHT0 64(DI)")
		if i < mr-1 {
			g.p("\tADDQ R12, DI")
		}
	}
	split := splitAcc(mr)
	g.zero512(mr)
	if split {
		g.zeroRange(2*mr, 4*mr)
	}
	aop := func(i, j int) string {
		if i < 6 {
			return fmt.Sprintf("%d(SI)", 64*i+4*j)
		}
		return fmt.Sprintf("%d(R10)", 64*(i-6)+4*j)
	}
	pfEvery := 16 / prefetchF32L2
	step := func(j int, inLoop bool) {
		g.p("\tPREFETCHT0 %d(DX)", 128*j+prefetchF32)
		g.p("\tPREFETCHT0 %d(DX)", 128*j+prefetchF32+64)
		if inLoop && j%pfEvery == 0 {
			g.p("\tPREFETCHT1 %d(R13)", 64*(j/pfEvery))
		}
		bo := 128 * j
		if !inLoop {
			bo, j = 0, 0
		}
		g.p("\tVMOVUPS %d(DX), Z24", bo)
		g.p("\tVMOVUPS %d(DX), Z25", bo+64)
		set := 0
		if split && j%2 == 1 {
			set = 2 * mr
		}
		for i := 0; i < mr; i++ {
			r := 26 + i%6
			g.p("\tVBROADCASTSS %s, Z%d", aop(i, j), r)
			g.p("\tVFMADD231PS Z24, Z%d, Z%d", r, set+2*i)
			g.p("\tVFMADD231PS Z25, Z%d, Z%d", r, set+2*i+1)
		}
	}
	g.p("\tSUBQ $16, CX")
	g.p("\tJLT %s_rest", name)
	g.p("%s_loop:", name)
	for j := 0; j < 16; j++ {
		step(j, true)
	}
	g.p("\tADDQ $%d, SI", 64*mr)
	if mr > 6 {
		g.p("\tADDQ $%d, R10", 64*mr)
	}
	g.p("\tADDQ $2048, DX")
	g.p("\tADDQ $%d, R13", 64*prefetchF32L2)
	g.p("\tSUBQ $16, CX")
	g.p("\tJGE %s_loop", name)
	g.p("%s_rest:", name)
	g.p("\tADDQ $16, CX")
	g.p("%s_tail:", name)
	g.p("\tTESTQ CX, CX")
	g.p("\tJEQ %s_done", name)
	step(0, false)
	g.p("\tADDQ $4, SI")
	if mr > 6 {
		g.p("\tADDQ $4, R10")
	}
	g.p("\tADDQ $128, DX")
	g.p("\tDECQ CX")
	g.p("\tJMP %s_tail", name)
	g.p("%s_done:", name)
	if split {
		g.foldAcc(mr)
	}
	g.store512At(name, mr, 24)
}

// splitAcc reports whether a kernel of mr rows keeps a second set of accumulators (for odd k
// steps). It never does: every kernel height sums each output over k in one chain, in k order,
// so that a row's result does not depend on the height of the micro-tile it lands in — that is,
// on how many other rows share its call and where it sits among them (issue 14: one score per
// item whatever else is in its batch). Splitting the chains of the short tiles (mr ≤ 4) hid
// the FMA latency (4 cycles, 2 ports: 8 chains needed, a 1-row tile has 2), but summed odd and
// even k apart, which made a row's value depend on its tile. The cost is confined to tiles of
// 1–3 rows, which are ragged edges and small experts (measured in issue 14's note).
func splitAcc(mr int) bool { return false }

func (g *gen) zeroRange(from, to int) {
	for i := from; i < to; i++ {
		g.p("\tVPXORD Z%d, Z%d, Z%d", i, i, i)
	}
}

// foldAcc adds the second accumulator set into the first.
func (g *gen) foldAcc(mr int) {
	for i := 0; i < 2*mr; i++ {
		g.p("\tVADDPS Z%d, Z%d, Z%d", 2*mr+i, i, i)
	}
}

// prefetchW16 is how far ahead (bytes of the B panel, 128 per k-pair) the bf16-weight kernel
// prefetches B into L1. Expert weights of an MoE layer are streamed from DRAM once per call
// (all of them are read by any batch of more than a few tokens); without software prefetch
// the hardware prefetcher, which restarts at every 4 KB page, left a 12-row tile on cold
// weights at about a third of its in-cache speed on the dev machine (Intel Xeon).
var prefetchW16 = 1024

// args512pf is the frame of the bf16-weight AVX-512 kernels: kern512's arguments and pf.
const args512pf = "$0-72"

// prefetch512Next turns on the bf16-weight AVX-512 kernels' pf stream: per k-pair step, the
// two 64-byte lines of the pf stream that match the 128 bytes of B the step reads (step u of
// an unrolled round at 128·u off R13). The Go side points pf at the block of B that the first
// row tile reads next (gemm_amd64.go, block), as for the AVX2 kernels: cold weights (an MoE
// layer's experts, streamed from DRAM once per pass) then arrive a block ahead. The in-stream
// prefetch (prefetchW16 ahead of B itself) does not reach across blocks, and each panel's
// block starts cold. On the Zen 4 dev machine (measured 2026-11-25) the AVX-512 path without
// it streamed the small MoE's experts at 21-28 GB/s for passes of 1-16 tokens where the AVX2
// path with it reached 26-44.
var prefetch512Next = true

func (g *gen) prefetchNext512(u int) {
	if !prefetch512Next {
		return
	}
	g.p("\tPREFETCHT0 %s", disp(128*u, "R13"))
	g.p("\tPREFETCHT0 %d(R13)", 128*u+64)
}

// advanceNext512 moves the pf stream past n steps.
func (g *gen) advanceNext512(n int) {
	if prefetch512Next {
		g.p("\tADDQ $%d, R13", 128*n)
	}
}

// w16Avx512 multiplies f32 A by bf16 B: each 64-byte load holds one k-pair of 16 columns; a
// shift left by 16 gives the even k as f32, an AND with 0xffff0000 the odd k (both exact).
// kc counts k (not pairs); an odd kc ends with a half step on the even k only.
func (g *gen) w16Avx512(mr int) {
	name := fmt.Sprintf("gemmW16Avx512_%d", mr)
	g.p("\n// func %s(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, mask uint32, acc int, pf unsafe.Pointer)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, %s", name, args512pf)
	g.prologue(mr)
	g.p("\tMOVQ pf+64(FP), R13")
	g.p("\tMOVL $0xffff0000, AX")
	g.p("\tVPBROADCASTD AX, Z31")
	g.p("\tMOVQ CX, BX")
	g.p("\tSHRQ $1, CX")
	g.zero512(mr)
	split := splitAcc(mr)
	odd := 0
	if split {
		g.zeroRange(2*mr, 4*mr)
		odd = 2 * mr
	}
	const U = 2
	step := func(u int, oddOnly bool) {
		if prefetchW16 > 0 && !oddOnly {
			g.p("\tPREFETCHT0 %d(DX)", 128*u+prefetchW16)
			g.p("\tPREFETCHT0 %d(DX)", 128*u+prefetchW16+64)
		}
		if !oddOnly {
			g.prefetchNext512(u)
		}
		g.p("\tVMOVDQU32 %d(DX), Z26", 128*u)
		g.p("\tVMOVDQU32 %d(DX), Z27", 128*u+64)
		g.p("\tVPSLLD $16, Z26, Z24")
		g.p("\tVPSLLD $16, Z27, Z25")
		if !oddOnly {
			g.p("\tVPANDD Z31, Z26, Z26")
			g.p("\tVPANDD Z31, Z27, Z27")
		}
		for i := 0; i < mr; i++ {
			g.p("\tVBROADCASTSS %s, Z28", rowAddr(i, 8*u))
			g.p("\tVFMADD231PS Z24, Z28, Z%d", 2*i)
			g.p("\tVFMADD231PS Z25, Z28, Z%d", 2*i+1)
			if !oddOnly {
				g.p("\tVBROADCASTSS %s, Z29", rowAddr(i, 8*u+4))
				g.p("\tVFMADD231PS Z26, Z29, Z%d", odd+2*i)
				g.p("\tVFMADD231PS Z27, Z29, Z%d", odd+2*i+1)
			}
		}
	}
	g.p("%s_loop%d:", name, U)
	g.p("\tCMPQ CX, $%d", U)
	g.p("\tJLT %s_tail", name)
	for u := 0; u < U; u++ {
		step(u, false)
	}
	g.advanceA(mr, 8*U)
	g.p("\tADDQ $%d, DX", 128*U)
	g.advanceNext512(U)
	g.p("\tSUBQ $%d, CX", U)
	g.p("\tJMP %s_loop%d", name, U)
	g.p("%s_tail:", name)
	g.p("\tTESTQ CX, CX")
	g.p("\tJEQ %s_odd", name)
	step(0, false)
	g.advanceA(mr, 8)
	g.p("\tADDQ $128, DX")
	g.advanceNext512(1)
	g.p("\tDECQ CX")
	g.p("\tJMP %s_tail", name)
	g.p("%s_odd:", name)
	g.p("\tTESTQ $1, BX")
	g.p("\tJEQ %s_done", name)
	step(0, true)
	g.p("%s_done:", name)
	if split {
		g.foldAcc(mr)
	}
	g.store512(name, mr)
}

// dotAvx512 multiplies bf16 A pairs (one uint32 per k-pair, broadcast) by bf16 B with
// VDPBF16PS; kc counts pairs.
func (g *gen) dotAvx512(mr int) {
	name := fmt.Sprintf("gemmDotAvx512_%d", mr)
	g.p("\n// func %s(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, mask uint32, acc int, pf unsafe.Pointer)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, %s", name, args512pf)
	g.prologue(mr)
	g.p("\tMOVQ pf+64(FP), R13")
	g.zero512(mr)
	const U = 4
	step := func(u int) {
		g.prefetchNext512(u)
		g.p("\tVMOVDQU32 %d(DX), Z24", 128*u)
		g.p("\tVMOVDQU32 %d(DX), Z25", 128*u+64)
		for i := 0; i < mr; i++ {
			r := 26 + i%4
			g.p("\tVPBROADCASTD %s, Z%d", rowAddr(i, 4*u), r)
			g.vdpbf16ps(2*i, 24, r)
			g.vdpbf16ps(2*i+1, 25, r)
		}
	}
	g.p("%s_loop%d:", name, U)
	g.p("\tCMPQ CX, $%d", U)
	g.p("\tJLT %s_tail", name)
	for u := 0; u < U; u++ {
		step(u)
	}
	g.advanceA(mr, 4*U)
	g.p("\tADDQ $%d, DX", 128*U)
	g.advanceNext512(U)
	g.p("\tSUBQ $%d, CX", U)
	g.p("\tJMP %s_loop%d", name, U)
	g.p("%s_tail:", name)
	g.p("\tTESTQ CX, CX")
	g.p("\tJEQ %s_done", name)
	step(0)
	g.advanceA(mr, 4)
	g.p("\tADDQ $128, DX")
	g.advanceNext512(1)
	g.p("\tDECQ CX")
	g.p("\tJMP %s_tail", name)
	g.p("%s_done:", name)
	g.store512(name, mr)
}

const args256 = "$0-64"

// storeRows writes the accumulators Y(vecs·i+q) of row i (columns 8q..8q+7; vecs 2 for a half
// panel, 4 for a whole one) to C, adding C's old values when acc != 0. The half-panel kernels
// compute all 16 columns: the Go side routes ragged column edges through a scratch tile.
func (g *gen) storeRows(name string, mr, vecs int) {
	g.p("\tMOVQ c+32(FP), DI")
	g.p("\tMOVQ ldc+40(FP), R12")
	g.p("\tMOVQ acc+48(FP), BX")
	g.p("\tTESTQ BX, BX")
	g.p("\tJEQ %s_store", name)
	for i := 0; i < mr; i++ {
		for q := 0; q < vecs; q++ {
			g.p("\tVADDPS %s, Y%d, Y%d", disp(32*q, "DI"), vecs*i+q, vecs*i+q)
		}
		for q := 0; q < vecs; q++ {
			g.p("\tVMOVUPS Y%d, %s", vecs*i+q, disp(32*q, "DI"))
		}
		if i < mr-1 {
			g.p("\tADDQ R12, DI")
		}
	}
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("%s_store:", name)
	for i := 0; i < mr; i++ {
		for q := 0; q < vecs; q++ {
			g.p("\tVMOVUPS Y%d, %s", vecs*i+q, disp(32*q, "DI"))
		}
		if i < mr-1 {
			g.p("\tADDQ R12, DI")
		}
	}
	g.p("\tVZEROUPPER")
	g.p("\tRET")
}

// disp is a memory operand off base at byte displacement d ("(DI)" for 0, as the assembler
// prints it).
func disp(d int, base string) string {
	if d == 0 {
		return "(" + base + ")"
	}
	return fmt.Sprintf("%d(%s)", d, base)
}

// zeroYmm clears Y0..Y(n-1), the accumulators.
func (g *gen) zeroYmm(n int) {
	for i := 0; i < n; i++ {
		g.p("\tVXORPS Y%d, Y%d, Y%d", i, i, i)
	}
}

// prefetchAvx2 emits, when on, n prefetches of consecutive 64-byte lines from the pf stream
// (R11) and advances it. The Go side points pf at the block of B the first row tile reads
// next (gemm_amd64.go, block), so each call brings in as many bytes as it reads, one block
// ahead. Without it a bf16 GEMM on cold weights (an MoE expert, streamed from DRAM once per
// pass) ran at 6-8 GB/s on the 2-core AMD EPYC dev machine, where touching the same bytes runs
// at 20+ GB/s: a 6-row tile took 68-76 µs on a 384×512 weight against 27-31 µs in cache.
func (g *gen) prefetchAvx2(n int) { g.prefetchLines(n, false) }

// prefetchLines emits prefetchAvx2's n lines from R11 on and, for a whole-panel call (both),
// the second half's n lines R13 bytes further (the Go side's pf and pfHalf).
func (g *gen) prefetchLines(n int, both bool) {
	if !prefetchAvx2On {
		return
	}
	for i := range n {
		g.p("\tPREFETCHT0 %d(R11)", 64*i)
		if both {
			g.p("\tPREFETCHT0 %d(R11)(R13*1)", 64*i)
		}
	}
	g.p("\tADDQ $%d, R11", 64*n)
}

var prefetchAvx2On = true

// f32Avx2 is the AVX2+FMA kernel on half a 32-column f32 panel (B row stride 128 bytes).
func (g *gen) f32Avx2(mr int) {
	name := fmt.Sprintf("gemmF32Avx2_%d", mr)
	g.p("\n// func %s(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, acc int, pf unsafe.Pointer)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, %s", name, args256)
	g.prologue(mr)
	g.p("\tMOVQ pf+56(FP), R11")
	g.zeroYmm(2 * mr)
	const U = 4
	step := func(u int) {
		g.p("\tVMOVUPS %d(DX), Y12", 128*u)
		g.p("\tVMOVUPS %d(DX), Y13", 128*u+32)
		for i := 0; i < mr; i++ {
			r := 14 + i%2
			g.p("\tVBROADCASTSS %s, Y%d", rowAddr(i, 4*u), r)
			g.p("\tVFMADD231PS Y12, Y%d, Y%d", r, 2*i)
			g.p("\tVFMADD231PS Y13, Y%d, Y%d", r, 2*i+1)
		}
	}
	g.f32LoopAvx2(name, mr, U, step, g.prefetchAvx2)
	g.storeRows(name, mr, 2)
}

// f32LoopAvx2 emits an AVX2 f32 kernel's k loop: u steps a round (step(0..u-1), one k each, B
// rows 128 bytes apart) while u values of k remain, then one at a time; prefetch(n) emits the
// prefetches of n rows of B.
func (g *gen) f32LoopAvx2(name string, mr, u int, step func(u int), prefetch func(n int)) {
	g.p("%s_loop%d:", name, u)
	g.p("\tCMPQ CX, $%d", u)
	g.p("\tJLT %s_tail", name)
	prefetch(u)
	for i := 0; i < u; i++ {
		step(i)
	}
	g.advanceA(mr, 4*u)
	g.p("\tADDQ $%d, DX", 128*u)
	g.p("\tSUBQ $%d, CX", u)
	g.p("\tJMP %s_loop%d", name, u)
	g.p("%s_tail:", name)
	g.p("\tTESTQ CX, CX")
	g.p("\tJEQ %s_done", name)
	prefetch(1)
	step(0)
	g.advanceA(mr, 4)
	g.p("\tADDQ $128, DX")
	g.p("\tDECQ CX")
	g.p("\tJMP %s_tail", name)
	g.p("%s_done:", name)
}

// w16Avx2 is the AVX2 kernel for f32 A by bf16 B on half a bf16 panel (16 columns × one k-pair
// = 64 bytes, B row stride 128 bytes). Y15 holds the 0xffff0000 mask, Y14 the A broadcast.
func (g *gen) w16Avx2(mr int) {
	name := fmt.Sprintf("gemmW16Avx2_%d", mr)
	g.p("\n// func %s(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, acc int, pf unsafe.Pointer)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, %s", name, args256)
	g.prologue(mr)
	g.p("\tMOVQ pf+56(FP), R11")
	g.p("\tMOVL $0xffff0000, AX")
	g.p("\tMOVQ AX, X15")
	g.p("\tVPBROADCASTD X15, Y15")
	g.p("\tMOVQ CX, BX")
	g.p("\tSHRQ $1, CX")
	g.zeroYmm(2 * mr)
	step := func(oddOnly bool) {
		g.p("\tVMOVDQU (DX), Y12")
		g.p("\tVMOVDQU 32(DX), Y13")
		g.p("\tVPSLLD $16, Y12, Y12")
		g.p("\tVPSLLD $16, Y13, Y13")
		for i := 0; i < mr; i++ {
			g.p("\tVBROADCASTSS %s, Y14", rowAddr(i, 0))
			g.p("\tVFMADD231PS Y12, Y14, Y%d", 2*i)
			g.p("\tVFMADD231PS Y13, Y14, Y%d", 2*i+1)
		}
		if oddOnly {
			return
		}
		g.p("\tVPAND (DX), Y15, Y12")
		g.p("\tVPAND 32(DX), Y15, Y13")
		for i := 0; i < mr; i++ {
			g.p("\tVBROADCASTSS %s, Y14", rowAddr(i, 4))
			g.p("\tVFMADD231PS Y12, Y14, Y%d", 2*i)
			g.p("\tVFMADD231PS Y13, Y14, Y%d", 2*i+1)
		}
	}
	g.w16LoopAvx2(name, mr, step, g.prefetchAvx2)
	g.storeRows(name, mr, 2)
}

// w16LoopAvx2 emits an AVX2 bf16 kernel's k loop: one k-pair a round (step(false); B rows 128
// bytes apart; CX the pairs, BX's low bit an odd last k), then the odd k alone (step(true));
// prefetch(n) emits the prefetches of n rows of B.
func (g *gen) w16LoopAvx2(name string, mr int, step func(oddOnly bool), prefetch func(n int)) {
	g.p("%s_loop:", name)
	g.p("\tTESTQ CX, CX")
	g.p("\tJEQ %s_odd", name)
	prefetch(1)
	step(false)
	g.advanceA(mr, 8)
	g.p("\tADDQ $128, DX")
	g.p("\tDECQ CX")
	g.p("\tJMP %s_loop", name)
	g.p("%s_odd:", name)
	g.p("\tTESTQ $1, BX")
	g.p("\tJEQ %s_done", name)
	step(true)
	g.p("%s_done:", name)
}

// wideRows is the tallest AVX2 micro-tile that also has a whole-panel kernel (f32Avx2Wide,
// w16Avx2Wide: mr×32, 4·mr accumulators). A half-panel tile of 1-3 rows has only 2-6
// accumulator chains, too few to hide the FMA latency (4 cycles, 2 pipes: 8 chains keep them
// busy), so it ran at 12-22 GMAC/s in cache against ~44 for 5-6 rows. The whole panel doubles
// the chains without changing any element's sum: each one still adds its products in k order
// from zero, so a row's value does not depend on which kernel computed it (issue 14).
const wideRows = 3

const argsWide = "$0-72"

// prefetchAvx2Wide is prefetchAvx2 for a whole-panel call: n lines from each half's stream.
func (g *gen) prefetchAvx2Wide(n int) { g.prefetchLines(n, true) }

func (g *gen) wideHeader(name string, mr int) {
	g.p("\n// func %s(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, acc int, pf unsafe.Pointer, pfHalf uintptr)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, %s", name, argsWide)
	g.prologue(mr)
	g.p("\tMOVQ pf+56(FP), R11")
	g.p("\tMOVQ pfHalf+64(FP), R13")
	g.zeroYmm(4 * mr)
}

// f32Avx2Wide is f32Avx2 on a whole 32-column f32 panel for mr <= wideRows rows: Y12.. hold the
// rows' A broadcasts, Y15 one quarter of B at a time, read once for all rows (B as the FMAs'
// memory operand, read once per row, made 2 rows load-bound: 41 GFLOP/s against 72 in L1 on the
// dev machine; a single row reads it so, 47 against 37).
func (g *gen) f32Avx2Wide(mr int) {
	name := fmt.Sprintf("gemmF32Avx2W_%d", mr)
	g.wideHeader(name, mr)
	const U = 4
	step := func(u int) {
		for i := 0; i < mr; i++ {
			g.p("\tVBROADCASTSS %s, Y%d", rowAddr(i, 4*u), 12+i)
		}
		for q := 0; q < 4; q++ {
			if mr == 1 {
				g.p("\tVFMADD231PS %d(DX), Y12, Y%d", 128*u+32*q, q)
				continue
			}
			g.p("\tVMOVUPS %d(DX), Y15", 128*u+32*q)
			for i := 0; i < mr; i++ {
				g.p("\tVFMADD231PS Y15, Y%d, Y%d", 12+i, 4*i+q)
			}
		}
	}
	g.f32LoopAvx2(name, mr, U, step, g.prefetchAvx2Wide)
	g.storeRows(name, mr, 4)
}

// w16Avx2Wide is w16Avx2 on a whole bf16 panel (32 columns × one k-pair = 128 bytes) for mr <=
// wideRows rows: Y12.. hold the rows' A broadcasts, Y15 one widened quarter of B at a time, and
// the odd k's mask is read from w16MaskAvx2 (no register is left for it at 3 rows).
func (g *gen) w16Avx2Wide(mr int) {
	name := fmt.Sprintf("gemmW16Avx2W_%d", mr)
	g.wideHeader(name, mr)
	g.p("\tMOVQ CX, BX")
	g.p("\tSHRQ $1, CX")
	// oneK multiplies the rows' A at byte offset off by the panel's k widened by widen (the even
	// k of each pair: shifted up; the odd k: masked).
	oneK := func(off int, widen string) {
		for i := 0; i < mr; i++ {
			g.p("\tVBROADCASTSS %s, Y%d", rowAddr(i, off), 12+i)
		}
		for q := 0; q < 4; q++ {
			g.p("\tVMOVDQU %d(DX), Y15", 32*q)
			g.p("\t%s", widen)
			for i := 0; i < mr; i++ {
				g.p("\tVFMADD231PS Y15, Y%d, Y%d", 12+i, 4*i+q)
			}
		}
	}
	step := func(oddOnly bool) {
		oneK(0, "VPSLLD $16, Y15, Y15")
		if !oddOnly {
			oneK(4, "VPAND w16MaskAvx2<>(SB), Y15, Y15")
		}
	}
	g.w16LoopAvx2(name, mr, step, g.prefetchAvx2Wide)
	g.storeRows(name, mr, 4)
}

// peak emits n iterations of 12 independent register-resident chains (FMA or VDPBF16PS). The
// operands are set to 0.5 and the chains to 0 first: whatever the registers held before could be
// denormal, and denormal operands take microcode assists on Intel cores.
func (g *gen) peak(name string, init []string, body func(i int)) {
	g.p("\n// func %s(n int)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, $0-8", name)
	g.p("\tMOVQ n+0(FP), CX")
	for _, l := range init {
		g.p("\t%s", l)
	}
	g.p("%s_loop:", name)
	for i := 0; i < 12; i++ {
		body(i)
	}
	g.p("\tDECQ CX")
	g.p("\tJNZ %s_loop", name)
	g.p("\tVZEROUPPER")
	g.p("\tRET")
}

func zeroRegs(prefix string, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		if prefix == "Z" {
			out = append(out, fmt.Sprintf("VPXORD Z%d, Z%d, Z%d", i, i, i))
		} else {
			out = append(out, fmt.Sprintf("VXORPS Y%d, Y%d, Y%d", i, i, i))
		}
	}
	return out
}

// packA copies a micro-tile of A (rows rows at byte stride lda, kc floats each) into the layout
// the f32 kernels read: ceil(kc/16) chunks of rows × 16 floats, a ragged last chunk padded with
// zeros (the kernels never read the padding).
func (g *gen) packA() {
	g.p("\n// func packAF32Avx512(dst unsafe.Pointer, src unsafe.Pointer, lda uintptr, rows int, kc int)")
	g.p("TEXT ·packAF32Avx512(SB), NOSPLIT, $0-40")
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ src+8(FP), SI")
	g.p("\tMOVQ lda+16(FP), R8")
	g.p("\tMOVQ rows+24(FP), BX")
	g.p("\tMOVQ kc+32(FP), CX")
	g.p("packa_chunk:")
	g.p("\tCMPQ CX, $16")
	g.p("\tJLT packa_last")
	g.p("\tMOVQ SI, AX")
	g.p("\tMOVQ BX, DX")
	g.p("packa_row:")
	g.p("\tVMOVUPS (AX), Z0")
	g.p("\tVMOVUPS Z0, (DI)")
	g.p("\tADDQ R8, AX")
	g.p("\tADDQ $64, DI")
	g.p("\tDECQ DX")
	g.p("\tJNZ packa_row")
	g.p("\tADDQ $64, SI")
	g.p("\tSUBQ $16, CX")
	g.p("\tJMP packa_chunk")
	g.p("packa_last:")
	g.p("\tTESTQ CX, CX")
	g.p("\tJEQ packa_done")
	g.p("\tMOVL $1, AX")
	g.p("\tSHLL CX, AX")
	g.p("\tDECL AX")
	g.p("\tKMOVW AX, K1")
	g.p("\tMOVQ SI, AX")
	g.p("\tMOVQ BX, DX")
	g.p("packa_lastrow:")
	g.p("\tVMOVUPS.Z (AX), K1, Z0")
	g.p("\tVMOVUPS Z0, (DI)")
	g.p("\tADDQ R8, AX")
	g.p("\tADDQ $64, DI")
	g.p("\tDECQ DX")
	g.p("\tJNZ packa_lastrow")
	g.p("packa_done:")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
}

// cvt converts n/16 blocks of 16 floats at src to bf16 at dst (round to nearest even).
func (g *gen) cvt() {
	g.p("\n// func cvtBF16Avx512(dst unsafe.Pointer, src unsafe.Pointer, n int)")
	g.p("TEXT ·cvtBF16Avx512(SB), NOSPLIT, $0-24")
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ src+8(FP), SI")
	g.p("\tMOVQ n+16(FP), CX")
	g.p("\tSHRQ $4, CX")
	g.p("cvt_loop:")
	g.p("\tTESTQ CX, CX")
	g.p("\tJEQ cvt_done")
	g.p("\tVMOVUPS (SI), Z0")
	g.vcvtneps2bf16(1, 0)
	g.p("\tVMOVDQU Y1, (DI)")
	g.p("\tADDQ $64, SI")
	g.p("\tADDQ $32, DI")
	g.p("\tDECQ CX")
	g.p("\tJMP cvt_loop")
	g.p("cvt_done:")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
}

func main() {
	flag.Parse()
	prefetchW16 = *pfW16
	prefetchAvx2On = *pfAvx2
	prefetch512Next = *pf512
	var g gen
	g.p("// Code generated by kernels/_gen; DO NOT EDIT.")
	g.p("")
	g.p("//go:build !purego")
	g.p("")
	g.p("#include \"textflag.h\"")
	g.p("")
	g.p("// w16MaskAvx2 keeps the high bf16 of each k-pair (the odd k) in place: an f32.")
	for i := 0; i < 4; i++ {
		g.p("DATA w16MaskAvx2<>+%d(SB)/8, $0xffff0000ffff0000", 8*i)
	}
	g.p("GLOBL w16MaskAvx2<>(SB), RODATA|NOPTR, $32")
	for mr := 1; mr <= 12; mr++ {
		g.f32Avx512(mr)
	}
	for mr := 1; mr <= 12; mr++ {
		g.w16Avx512(mr)
	}
	for mr := 1; mr <= 12; mr++ {
		g.dotAvx512(mr)
	}
	for mr := 1; mr <= 6; mr++ {
		g.f32Avx2(mr)
	}
	for mr := 1; mr <= 6; mr++ {
		g.w16Avx2(mr)
	}
	for mr := 1; mr <= wideRows; mr++ {
		g.f32Avx2Wide(mr)
	}
	for mr := 1; mr <= wideRows; mr++ {
		g.w16Avx2Wide(mr)
	}
	half512 := func(bits string) []string {
		return append([]string{"MOVL $" + bits + ", AX", "VPBROADCASTD AX, Z30", "VMOVDQU32 Z30, Z31"}, zeroRegs("Z", 12)...)
	}
	g.peak("peakF32Avx512", half512("0x3f000000"), func(i int) { g.p("\tVFMADD231PS Z30, Z31, Z%d", i) })
	g.peak("peakDotAvx512", half512("0x3f003f00"), func(i int) { g.vdpbf16ps(i, 30, 31) })
	g.peak("peakF32Avx2", append([]string{"MOVL $0x3f000000, AX", "MOVQ AX, X15", "VPBROADCASTD X15, Y15", "VMOVUPS Y15, Y14"}, zeroRegs("Y", 12)...),
		func(i int) { g.p("\tVFMADD231PS Y14, Y15, Y%d", i) })
	g.cvt()
	g.packA()
	genAMX()
	if *verify {
		if err := verifyEncodings(); err != nil {
			log.Fatal(err)
		}
	}
	if err := os.WriteFile(*out, g.b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*decl, declarations(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// declarations returns the Go file declaring every kernel and the per-height kernel tables.
func declarations() []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("// Code generated by kernels/_gen; DO NOT EDIT.")
	w("")
	w("//go:build !purego")
	w("")
	w("package kernels")
	w("")
	w("import \"unsafe\"")
	const sig512 = "(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, mask uint32, acc int, pf unsafe.Pointer)"
	const sigF32 = "(a unsafe.Pointer, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, mask uint32, acc int, pf unsafe.Pointer)"
	const sig256 = "(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, acc int, pf unsafe.Pointer)"
	const sigWide = "(a unsafe.Pointer, lda uintptr, b unsafe.Pointer, kc int, c unsafe.Pointer, ldc uintptr, acc int, pf unsafe.Pointer, pfHalf uintptr)"
	w("")
	w("// kern512 computes an mr×32 tile: C (masked columns) = [C +] A[mr×kc]·B-panel[kc×32]. It")
	w("// also prefetches into L1 the 128 bytes from pf on per k-pair of B it reads.")
	w("type kern512 func%s", sig512)
	w("")
	w("// kernF32 computes an mr×32 tile of f32: C (masked columns) = [C +] A·B-panel[kc×32], A packed")
	w("// (packAF32Avx512); it also prefetches f32PrefetchPer16 bytes from pf on into L2 per 16 k.")
	w("type kernF32 func%s", sigF32)
	w("")
	w("// f32PrefetchPer16 is how many bytes of its pf stream a kernF32 prefetches per 16 k of kc.")
	w("const f32PrefetchPer16 = %d", 64*prefetchF32L2)
	w("")
	w("// kern256 computes an mr×16 tile on half a 32-column panel: C = [C +] A·B. It also")
	w("// prefetches into L1 one 64-byte line from pf on per row of B it reads (per k for f32, per")
	w("// k-pair for bf16): as many bytes as it reads of B.")
	w("type kern256 func%s", sig256)
	w("")
	w("// kern256w is kern256 on a whole 32-column panel (an mr×32 tile, mr <= %d): one line from pf on", wideRows)
	w("// and one from pf+pfHalf on per row of B it reads, as the two half-panel calls would.")
	w("type kern256w func%s", sigWide)
	table := func(name, prefix string, n int, typ string) {
		w("")
		w("var %s = [...]%s{nil,", name, typ)
		for mr := 1; mr <= n; mr++ {
			w("\t%s_%d,", prefix, mr)
		}
		w("}")
	}
	table("f32Avx512", "gemmF32Avx512", 12, "kernF32")
	table("w16Avx512", "gemmW16Avx512", 12, "kern512")
	table("dotAvx512", "gemmDotAvx512", 12, "kern512")
	table("f32Avx2", "gemmF32Avx2", 6, "kern256")
	table("w16Avx2", "gemmW16Avx2", 6, "kern256")
	table("f32Avx2Wide", "gemmF32Avx2W", wideRows, "kern256w")
	table("w16Avx2Wide", "gemmW16Avx2W", wideRows, "kern256w")
	decls := func(prefix string, n int, sig string) {
		for mr := 1; mr <= n; mr++ {
			w("")
			w("//go:noescape")
			w("func %s_%d%s", prefix, mr, sig)
		}
	}
	decls("gemmF32Avx512", 12, sigF32)
	decls("gemmW16Avx512", 12, sig512)
	decls("gemmDotAvx512", 12, sig512)
	decls("gemmF32Avx2", 6, sig256)
	decls("gemmW16Avx2", 6, sig256)
	decls("gemmF32Avx2W", wideRows, sigWide)
	decls("gemmW16Avx2W", wideRows, sigWide)
	for _, p := range []string{"peakF32Avx512", "peakDotAvx512", "peakF32Avx2"} {
		w("")
		w("func %s(n int)", p)
	}
	w("")
	w("//go:noescape")
	w("func cvtBF16Avx512(dst unsafe.Pointer, src unsafe.Pointer, n int)")
	w("")
	w("//go:noescape")
	w("func packAF32Avx512(dst unsafe.Pointer, src unsafe.Pointer, lda uintptr, rows int, kc int)")
	amxDeclarations(&b)
	return b.Bytes()
}

// verifyEncodings assembles every BYTE-encoded instruction with GNU as and compares bytes.
func verifyEncodings() error {
	if _, err := exec.LookPath("as"); err != nil {
		log.Printf("as not found: BYTE encodings not verified")
		return nil
	}
	dir, err := os.MkdirTemp("", "gemmgen")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var src strings.Builder
	src.WriteString(".intel_syntax noprefix\n")
	var order []string
	for ins := range checks {
		order = append(order, ins)
		src.WriteString(ins + "\n")
	}
	s, o := filepath.Join(dir, "x.s"), filepath.Join(dir, "x.o")
	if err := os.WriteFile(s, []byte(src.String()), 0o644); err != nil {
		return err
	}
	if b, err := exec.Command("as", s, "-o", o).CombinedOutput(); err != nil {
		return fmt.Errorf("as: %v: %s", err, b)
	}
	dump, err := exec.Command("objdump", "-d", "--insn-width=16", "-M", "intel", o).Output()
	if err != nil {
		return fmt.Errorf("objdump: %w", err)
	}
	re := regexp.MustCompile(`^\s*[0-9a-f]+:\s+((?:[0-9a-f]{2} )+)\s*(.*)$`)
	n := 0
	for _, line := range strings.Split(string(dump), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if n >= len(order) {
			return fmt.Errorf("objdump: more instructions than assembled")
		}
		want := strings.TrimSpace(m[1])
		got := fmt.Sprintf("% x", checks[order[n]])
		if want != got {
			return fmt.Errorf("encoding of %q: as gives %s, generator %s", order[n], want, got)
		}
		n++
	}
	if n != len(order) {
		return fmt.Errorf("objdump listed %d instructions, want %d", n, len(order))
	}
	log.Printf("verified %d BYTE encodings against GNU as", n)
	return nil
}
