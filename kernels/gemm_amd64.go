//go:build !purego

package kernels

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// packWeights: the assembly kernels read packed panels (gemm_pack.go).
const packWeights = true

// Tuning knobs (variables so the tuning test can sweep them).
var (
	// kcF32 is the k extent of a cache block for f32 weights. One micro-kernel call then reads a
	// packed 12×256 A micro-panel (12 KB, reused across the panels of the block, in L1) and
	// streams one panel's 256×32 block of B (32 KB) from L2, where the block of B (≤512 columns,
	// 512 KB) stays beside the next one being prefetched. Against 128 it halves the passes over
	// C and the calls; measured on the dev machine (48 KB L1, 2 MB L2) 256 was 1-3 % faster
	// than 128 and level with 384.
	kcF32 = 256
	// kcBF16 is the same for bf16 weights (k, not pairs): B takes half the bytes per k.
	kcBF16 = 256
	// ncMax is the widest column block (16 panels).
	ncMax = 512
	// mcMax bounds the rows of one Linear task so big-m products still give many tasks.
	mcMax = 240
	// minFlopsPerWorker: below this much work per goroutine, starting and waking one costs
	// more than it saves (about 10 µs of kernel time).
	minFlopsPerWorker = 1 << 20
	// panelOuter: loop panels outside micro-tiles (B micro-panel in L1, A from L2) instead of
	// micro-tiles outside panels (A micro-panel in L1, B block from L2).
	panelOuter = false
	// avx2WideRows: AVX2 row tiles of at most this many rows run on a whole 32-column panel per
	// call (kern256w, 4 accumulator chains a row) instead of two half-panel calls (2 a row):
	// short tiles are bound by the FMA latency, not its throughput. 0 turns it off.
	avx2WideRows = len(w16Avx2Wide) - 1
)

type gemmMode uint8

const (
	modeF32 gemmMode = iota // f32 A × f32 B
	modeW16                 // f32 A × bf16 B, widened in registers
	modeDot                 // bf16 A pairs × bf16 B, VDPBF16PS
	modeAMX                 // bf16 A (1 part: bf16 dot products; 3 parts: f32 accuracy) × bf16 B, AMX tiles (gemm_amx_amd64.go)
)

// gemmOp is one prepared product dst = A·Wᵀ: where A's rows start and how far apart, the
// packed weight, dst, and the kernels for the chosen ISA and mode.
type gemmOp struct {
	isa        isaLevel
	mode       gemmMode
	k, kcBlock int
	a          unsafe.Pointer // row 0 of A (x itself, or its bf16 pairs)
	amxParts   int            // modeAMX: bf16 terms per activation (1 or 3); A is then in tile order
	lda        uintptr        // bytes between rows of A
	b          unsafe.Pointer // packed panels
	panelBytes uintptr        // bytes of one panel over all of K
	dst        unsafe.Pointer
	ldc        uintptr // bytes between rows of dst
	k512       *[13]kern512
	kf32       *[13]kernF32 // f32 weights on AVX-512: packed A (packA), blockF32
	n          int          // columns of W
	// Where packA put A: row tiles of apTile rows, each apTilePad rows of packed micro-tiles,
	// apMPad rows in all per k block, apChunks chunks of 16 k per micro-tile and k block.
	apTile, apTilePad, apMPad, apChunks int
	apBuf                               *[]float32 // packA's buffer, from aPackCache
	k256                                *[7]kern256
	k256w                               *[4]kern256w // whole-panel AVX2 kernels for short tiles
	abuf                                *[]uint32    // pooled copy of A: bf16 pairs (modeDot) or a padded f32 copy (unalias)
	// thenB is the first block of the weight multiplied after this product (prefetchThen; nil:
	// none), thenHalf the bytes between its two halves' prefetch streams.
	thenB    unsafe.Pointer
	thenHalf uintptr
}

var abufPool = sync.Pool{New: func() any { return new([]uint32) }}

// scratchPool holds the 6×16 tiles the AVX2 path computes ragged column edges into.
var scratchPool = sync.Pool{New: func() any { return new([6 * 16]float32) }}

// prepare sets up op for m rows of x; for the VDPBF16PS path it rounds those rows to bf16 pairs
// (done once per call: it is O(m·K) against the product's O(m·N·K)). release returns the buffer.
//
// The path depends on the weight and the process-wide modes only, never on m: the AMX tiles and
// the AVX-512 FMAs add up a row's products in different orders, so a product that took AVX-512
// for a few rows and AMX for many would give a row a value that depends on how many other rows
// shared its call (issue 14). Small products on AMX pay for whole 16-row tiles instead.
func (op *gemmOp) prepare(isa isaLevel, dst []float32, ldDst int, x []float32, ldX int, m int, w *Weight) {
	*op = gemmOp{isa: isa, k: w.K, n: w.N, dst: unsafe.Pointer(unsafe.SliceData(dst)), ldc: uintptr(ldDst) * 4}
	op.a, op.lda = unsafe.Pointer(unsafe.SliceData(x)), uintptr(ldX)*4
	op.b, op.panelBytes = packedPanels(w)
	if w.DType == F32 {
		op.mode, op.kcBlock = modeF32, kcF32
		op.k256, op.k256w = &f32Avx2, &f32Avx2Wide
		if isa >= isaAVX512 {
			op.kf32 = &f32Avx512 // A is packed by packA once the tiling is known
			return
		}
		op.unalias(x, ldX, m)
		return
	}
	switch {
	case isa >= isaAMX && bf16Dot.Load():
		op.mode = modeAMX
		op.toAMXTiles(x, ldX, m, 1)
	case isa >= isaAVX512BF16 && bf16Dot.Load():
		op.mode, op.kcBlock, op.k512 = modeDot, kcBF16, &dotAvx512
		op.toBF16Pairs(x, ldX, m)
	case isa >= isaAMX && amxSplit.Load():
		op.mode = modeAMX
		op.toAMXTiles(x, ldX, m, amxSplitParts)
	default:
		op.mode, op.kcBlock = modeW16, kcBF16
		op.k512, op.k256, op.k256w = &w16Avx512, &w16Avx2, &w16Avx2Wide
		op.unalias(x, ldX, m)
	}
}

// packedPanels returns where w's packed panels start and the bytes of one panel over all of K
// (gemm_pack.go).
func packedPanels(w *Weight) (unsafe.Pointer, uintptr) {
	if w.DType == F32 {
		return unsafe.Pointer(unsafe.SliceData(w.p32)), uintptr(w.storedK()) * panelWidth * 4
	}
	return unsafe.Pointer(unsafe.SliceData(w.p16)), uintptr(bf16PanelPairs(w.K)) * panelWidth * 4
}

// blockRows is how many 128-byte rows of a panel the kernels read for kc values of k: one per
// k for f32 weights, one per k-pair for bf16 (an odd last k is read but not counted).
func (op *gemmOp) blockRows(kc int) uintptr {
	if op.mode == modeW16 || op.mode == modeDot {
		return uintptr(kc / 2)
	}
	return uintptr(kc)
}

func (op *gemmOp) release() {
	if op.abuf != nil {
		abufPool.Put(op.abuf)
		op.abuf = nil
	}
	if op.apBuf != nil {
		putAPack(op.apBuf)
		op.apBuf = nil
	}
}

// aPackCache keeps a few of packA's buffers between calls. It is not a sync.Pool: under the race
// detector a Pool drops a quarter of what it is given, and the f32 GEMM (MoE experts included)
// must not allocate per call there either. Buffers over aPackCacheMax floats are not kept.
var aPackCache [4]atomic.Pointer[[]float32]

const aPackCacheMax = 1 << 21 // 8 MB

func getAPack(n int) *[]float32 {
	for i := range aPackCache {
		if b := aPackCache[i].Swap(nil); b != nil {
			if cap(*b) < n {
				*b = make([]float32, n)
			}
			return b
		}
	}
	b := make([]float32, n)
	return &b
}

func putAPack(b *[]float32) {
	if cap(*b) > aPackCacheMax {
		return
	}
	for i := range aPackCache {
		if aPackCache[i].CompareAndSwap(nil, b) {
			return
		}
	}
}

// toBF16Pairs converts m rows of x into a pooled buffer of bf16 k-pairs (one uint32 per pair,
// the odd K padded with zero). Rows are 64-byte aligned and never a multiple of 4 KB apart, so
// the 12 rows of a micro-tile do not fight over the same L1 sets.
func (op *gemmOp) toBF16Pairs(x []float32, ldX, m int) {
	k := op.k
	kp := (k + 1) / 2
	ld := (kp + 15) &^ 15
	if ld%1024 == 0 {
		ld += 16
	}
	op.abuf = abufPool.Get().(*[]uint32)
	if cap(*op.abuf) < m*ld {
		*op.abuf = make([]uint32, m*ld)
	}
	buf := (*op.abuf)[:m*ld]
	bulk := k &^ 15
	for i := 0; i < m; i++ {
		row := buf[i*ld : i*ld+kp]
		src := x[i*ldX : i*ldX+k]
		if bulk > 0 {
			cvtBF16Avx512(unsafe.Pointer(&row[0]), unsafe.Pointer(&src[0]), bulk)
		}
		h := unsafe.Slice((*uint16)(unsafe.Pointer(&row[0])), 2*kp)
		for kk := bulk; kk < k; kk++ {
			h[kk] = RoundBF16(src[kk])
		}
		if k%2 == 1 {
			h[k] = 0
		}
	}
	op.a, op.lda = unsafe.Pointer(unsafe.SliceData(buf)), uintptr(ld)*4
}

// unalias copies A to a pooled buffer with a padded row stride when x's rows are a multiple
// of 4 KB apart (K = 1024, 2048, …): the rows of a micro-tile would then share L1 sets and
// evict each other between the panels that reuse them. The copy is O(m·K) once per call.
func (op *gemmOp) unalias(x []float32, ldX, m int) {
	if ldX%1024 != 0 || m < 2 {
		return
	}
	k := op.k
	ld := ldX + 16
	op.abuf = abufPool.Get().(*[]uint32)
	if cap(*op.abuf) < m*ld {
		*op.abuf = make([]uint32, m*ld)
	}
	buf := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(*op.abuf))), m*ld)
	for i := 0; i < m; i++ {
		copy(buf[i*ld:i*ld+k], x[i*ldX:i*ldX+k])
	}
	op.a, op.lda = unsafe.Pointer(unsafe.SliceData(buf)), uintptr(ld)*4
}

// microTile is the micro-tile height for a requested tile height (see gemmRows).
func microTile(isa isaLevel, tileM int) int {
	mr := 12
	if isa < isaAVX512 {
		mr = 6
	}
	if tileM >= 1 && tileM < mr {
		return tileM
	}
	return mr
}

// block computes dst rows [r0, r1) × columns [c0, c1) over all of K: for each k block, each
// micro-tile of mt rows runs against every panel of the column range (the A micro-panel stays
// in L1, the block of B in L2).
func (op *gemmOp) block(r0, r1, c0, c1, mt int) {
	if op.mode == modeAMX {
		op.blockAMX(r0, r1, c0, c1)
		return
	}
	if op.kf32 != nil {
		op.blockF32(r0, r1, c0, c1, mt)
		return
	}
	for k0 := 0; k0 < op.k; k0 += op.kcBlock {
		kc := min(op.kcBlock, op.k-k0)
		acc := 0
		if k0 > 0 {
			acc = 1
		}
		kArg := kc
		var aOff, bOff uintptr
		switch op.mode {
		case modeF32:
			aOff, bOff = uintptr(k0)*4, uintptr(k0)*panelWidth*4
		case modeW16:
			aOff, bOff = uintptr(k0)*4, uintptr(k0/2)*panelWidth*4
		case modeDot:
			aOff, bOff = uintptr(k0/2)*4, uintptr(k0/2)*panelWidth*4
			kArg = (kc + 1) / 2
		}
		// The AVX2 and the bf16-weight AVX-512 kernels prefetch, while the first row tile reads
		// a panel's block of B, the block it reads next (the next panel, then the first panel of
		// the next k block): an AVX-512 call or a whole-panel AVX2 call brings in all of it, a
		// half-panel AVX2 call one half. Later row tiles find B in L2 and prefetch their own
		// lines, which costs a load slot and nothing else. (The f32 AVX-512 kernels have their
		// own scheme, blockF32.)
		p0, p1 := c0/panelWidth, (c1+panelWidth-1)/panelWidth
		nextOff := op.blockRows(k0+kc) * panelWidth * 4 // k0+kc is even unless it is K (then unused)
		// next is where call (i, p) prefetches from and how far apart its two halves start; the
		// start of either half stays inside the packed weight (what the kernel reads past it
		// belongs to the next block or nothing: a prefetch never faults).
		next := func(i, p int) (unsafe.Pointer, uintptr) {
			switch {
			case i != r0:
			case p+1 < p1:
				return unsafe.Add(op.b, uintptr(p+1)*op.panelBytes+bOff), op.blockRows(kc) * 64
			case k0+kc < op.k:
				return unsafe.Add(op.b, uintptr(p0)*op.panelBytes+nextOff), op.blockRows(min(op.kcBlock, op.k-k0-kc)) * 64
			case op.thenB != nil: // the last panel of the last k block
				return op.thenB, op.thenHalf
			}
			return unsafe.Add(op.b, uintptr(p)*op.panelBytes+bOff), 64
		}
		if panelOuter {
			for p := p0; p < p1; p++ {
				for i := r0; i < r1; i += mt {
					pf, ph := next(i, p)
					op.tile(i, min(mt, r1-i), p, c0, c1, aOff, bOff, kArg, acc, pf, ph)
				}
			}
			continue
		}
		for i := r0; i < r1; i += mt {
			for p := p0; p < p1; p++ {
				pf, ph := next(i, p)
				op.tile(i, min(mt, r1-i), p, c0, c1, aOff, bOff, kArg, acc, pf, ph)
			}
		}
	}
}

// packA packs m rows of x for the f32 AVX-512 kernels, in the micro-tiles block will walk: row
// tiles of tile rows, each cut into micro-tiles of mt rows. For each k block a micro-tile of h
// rows becomes ceil(kc/16) chunks of h rows × 16 floats (packAF32Avx512): the kernel reads one
// contiguous stream with every A operand a short displacement off one register, the micro-tiles
// of a k block follow each other (so the next one can be prefetched), and the rows no longer
// share L1 sets as rows a multiple of 4 KB apart do. One O(m·K) copy per call.
func (op *gemmOp) packA(x []float32, ldX, m, tile, mt int) {
	kcb := op.kcBlock
	op.apTile, op.apTilePad = tile, (tile+mt-1)/mt*mt
	op.apMPad = (m + tile - 1) / tile * op.apTilePad
	op.apChunks = (kcb + 15) / 16
	n := (op.k + kcb - 1) / kcb * op.apMPad * 16 * op.apChunks
	op.apBuf = getAPack(n)
	op.a, op.lda = unsafe.Pointer(unsafe.SliceData(*op.apBuf)), 0
	for k0 := 0; k0 < op.k; k0 += kcb {
		kc := min(kcb, op.k-k0)
		for t0 := 0; t0 < m; t0 += tile {
			t1 := min(t0+tile, m)
			for i := t0; i < t1; i += mt {
				packAF32Avx512(op.aPacked(k0, i), unsafe.Pointer(&x[i*ldX+k0]), uintptr(ldX)*4, min(mt, t1-i), kc)
			}
		}
	}
}

// aPacked is where packA put the micro-tile that starts at row i, for the k block at k0.
func (op *gemmOp) aPacked(k0, i int) unsafe.Pointer {
	p := i/op.apTile*op.apTilePad + i%op.apTile
	return unsafe.Add(op.a, uintptr((k0/op.kcBlock*op.apMPad+p)*16*op.apChunks)*4)
}

// blockF32 is block for f32 weights on AVX-512 (packed A). Besides its tile, each kernel call
// prefetches a stretch of memory into L2 (f32PrefetchPer16 bytes per 16 k), which this loop
// points at what will be needed next:
//   - the next cache block of B (the same panels at the next k block; after the last k block,
//     the next column range at k 0, which is what one thread computes next), split between the
//     calls of the last micro-tile rows of the block, one share of each panel's kc × 32 block
//     per row. Without it the first micro-tile row of every block waited for B from L3 (it ran
//     ~40 % slower than the others on the dev machine); prefetched by the first rows instead,
//     the block was evicted again before use. A block of one micro-tile row does not prefetch
//     B: it streams every block once, and the extra stream cost m = 1 and 12 a few %.
//   - otherwise, on the first panel of a micro-tile row, the next micro-tile's packed A.
func (op *gemmOp) blockF32(r0, r1, c0, c1, mt int) {
	p0, p1 := c0/panelWidth, (c1+panelWidth-1)/panelWidth
	nt := (r1 - r0 + mt - 1) / mt
	for k0 := 0; k0 < op.k; k0 += op.kcBlock {
		kc := min(op.kcBlock, op.k-k0)
		acc := 0
		if k0 > 0 {
			acc = 1
		}
		bOff := uintptr(k0) * panelWidth * 4
		// The next block: panels [q0, q1) at k nk0; a call covers share bytes of a panel's block.
		q0, q1, nk0 := p0, p1, k0+kc
		if nk0 >= op.k {
			q0, q1, nk0 = p1, min(p1+(p1-p0), numPanels(op.n)), 0
		}
		share := uintptr(kc/16) * f32PrefetchPer16
		parts := 0
		if share > 0 && nt > 1 { // one micro-tile row streams B once: nothing to get ahead of
			parts = int((uintptr(min(op.kcBlock, op.k-nk0))*panelWidth*4 + share - 1) / share)
		}
		for i, t := r0, min(0, parts-nt); i < r1; i, t = i+mt, t+1 {
			rows := min(mt, r1-i)
			a := op.aPacked(k0, i)
			nextA := op.aPacked(nk0, r0)
			if i+mt < r1 {
				nextA = op.aPacked(k0, i+mt)
			}
			crow := unsafe.Add(op.dst, uintptr(i)*op.ldc)
			for p := p0; p < p1; p++ {
				b := unsafe.Add(op.b, uintptr(p)*op.panelBytes+bOff)
				pf := b // nothing to prefetch: B's own lines, already in L1
				if q := q0 + p - p0; t >= 0 && q < q1 {
					pf = unsafe.Add(op.b, uintptr(q)*op.panelBytes+uintptr(nk0)*panelWidth*4+uintptr(t)*share)
				} else if p == p0 {
					pf = nextA
				}
				cs := p * panelWidth
				lo, hi := max(c0-cs, 0), min(c1-cs, panelWidth)
				mask := uint32((uint64(1)<<hi - 1) &^ (uint64(1)<<lo - 1))
				op.kf32[rows](a, b, kc, unsafe.Add(crow, cs*4), op.ldc, mask, acc, pf)
			}
		}
	}
}

// tile runs one micro-kernel call: rows [i, i+rows) against panel p, columns clipped to [c0, c1).
// An AVX2 half-panel call h prefetches from pf + h·pfHalf on (the AVX-512 kernels prefetch
// within their own stream).
func (op *gemmOp) tile(i, rows, p, c0, c1 int, aOff, bOff uintptr, kArg, acc int, pf unsafe.Pointer, pfHalf uintptr) {
	a := unsafe.Add(op.a, uintptr(i)*op.lda+aOff)
	crow := unsafe.Add(op.dst, uintptr(i)*op.ldc)
	b := unsafe.Add(op.b, uintptr(p)*op.panelBytes+bOff)
	cs := p * panelWidth
	lo, hi := max(c0-cs, 0), min(c1-cs, panelWidth)
	if op.isa >= isaAVX512 {
		mask := uint32((uint64(1)<<hi - 1) &^ (uint64(1)<<lo - 1))
		op.k512[rows](a, op.lda, b, kArg, unsafe.Add(crow, cs*4), op.ldc, mask, acc, pf)
		return
	}
	if rows <= avx2WideRows && lo == 0 && hi == panelWidth {
		op.k256w[rows](a, op.lda, b, kArg, unsafe.Add(crow, cs*4), op.ldc, acc, pf, pfHalf)
		return
	}
	for h := 0; h < 2; h++ {
		hlo, hhi := max(lo-16*h, 0), min(hi-16*h, 16)
		if hlo >= hhi {
			continue
		}
		bh, ch := unsafe.Add(b, 64*h), unsafe.Add(crow, (cs+16*h)*4)
		pfh := unsafe.Add(pf, uintptr(h)*pfHalf)
		if hlo == 0 && hhi == 16 {
			op.k256[rows](a, op.lda, bh, kArg, ch, op.ldc, acc, pfh)
			continue
		}
		// A ragged column edge: compute the whole half panel aside, keep its valid part.
		// (Put at the end of the iteration, not deferred: a defer in a loop is allocated.)
		scratch := scratchPool.Get().(*[6 * 16]float32)
		op.k256[rows](a, op.lda, bh, kArg, unsafe.Pointer(&scratch[0]), 64, 0, pfh)
		for r := 0; r < rows; r++ {
			for j := hlo; j < hhi; j++ {
				d := (*float32)(unsafe.Add(ch, uintptr(r)*op.ldc+uintptr(j)*4))
				if acc != 0 {
					*d += scratch[r*16+j]
				} else {
					*d = scratch[r*16+j]
				}
			}
		}
		scratchPool.Put(scratch)
	}
}

func gemmRowsImpl(dst []float32, ldDst int, x []float32, ldX int, m int, w *Weight, n0, n1 int, tileM int, then *Weight) {
	isa := activeISA()
	if isa == isaGeneric || (w.p32 == nil && w.p16 == nil) {
		gemmRowsGeneric(dst, ldDst, x, ldX, m, w, n0, n1)
		return
	}
	var op gemmOp
	op.prepare(isa, dst, ldDst, x, ldX, m, w)
	defer op.release()
	mt := microTile(isa, tileM)
	tile := m
	if tileM > mt && op.mode != modeAMX { // AMX: A is in 16-row tile order, one block keeps it aligned
		tile = tileM
	}
	if op.kf32 != nil {
		op.packA(x, ldX, m, tile, mt)
	}
	for c0 := n0; c0 < n1; {
		c1 := min(n1, c0/panelWidth*panelWidth+ncMax)
		for t0 := 0; t0 < m; t0 += tile {
			if c1 == n1 && t0+tile >= m {
				op.prefetchThen(then, n0)
			}
			op.block(t0, min(t0+tile, m), c0, c1, mt)
		}
		c0 = c1
	}
}

// prefetchThen points the last block's final prefetch at the first block of then (the weight
// the caller multiplies next), at the panel of column n0, when then is packed as the kernels of
// this product read it (the f32 AVX-512 kernels prefetch on their own scheme and take none).
func (op *gemmOp) prefetchThen(then *Weight, n0 int) {
	if then == nil || (op.isa >= isaAVX512 && op.kf32 != nil) {
		return
	}
	bf16 := (op.mode == modeW16 || op.mode == modeDot) && then.p16 != nil
	if !bf16 && !(op.mode == modeF32 && then.p32 != nil) {
		return
	}
	p := n0 / panelWidth
	if p >= numPanels(then.N) {
		p = 0
	}
	b, panelBytes := packedPanels(then)
	op.thenB = unsafe.Add(b, uintptr(p)*panelBytes)
	op.thenHalf = op.blockRows(min(op.kcBlock, then.K)) * 64
}

// linearImpl runs dst = x·Wᵀ on up to t goroutines (the caller plus t-1 started for the call).
// The work is a grid of tasks — column blocks of whole panels × row blocks of whole micro-tiles
// — taken from an atomic counter, so a thread slowed by other load on its core takes fewer.
// Small m splits columns only (each thread streams its own part of W); big m splits rows too.
func linearImpl(dst, x []float32, m int, w *Weight, t int) {
	isa := activeISA()
	if isa == isaGeneric || (w.p32 == nil && w.p16 == nil) {
		linearGeneric(dst, x, m, w, t)
		return
	}
	// The op comes from a pool: the worker closures below capture it, which would move a
	// local one to the heap on every call, even a one-thread call that starts no worker.
	op := gemmOpPool.Get().(*gemmOp)
	defer func() {
		op.release()
		*op = gemmOp{} // drop the references to the caller's slices
		gemmOpPool.Put(op)
	}()
	op.prepare(isa, dst, w.N, x, w.K, m, w)
	mt := microTile(isa, 0)
	if op.mode == modeAMX {
		mt = 32 // row blocks must start on AMX's 16-row tiles
	}
	if op.kf32 != nil {
		op.packA(x, w.K, m, m, mt)
	}
	panels := numPanels(w.N)
	mTiles := (m + mt - 1) / mt

	nb := (panels*panelWidth + ncMax - 1) / ncMax
	mb := 1
	if t > 1 {
		want := 4 * t // enough tasks to even out uneven cores
		nb = max(nb, min(panels, want))
		if nb < want {
			mb = min(mTiles, (want+nb-1)/nb)
		}
		mb = max(mb, min(mTiles, (m+mcMax-1)/mcMax))
	}
	ppb := (panels + nb - 1) / nb // panels per column block
	nb = (panels + ppb - 1) / ppb
	tpb := (mTiles + mb - 1) / mb // micro-tiles per row block
	mb = (mTiles + tpb - 1) / tpb
	tasks := nb * mb
	g := linearGrid{mb: mb, ppb: ppb, tpb: tpb, mt: mt, m: m, n: w.N}

	workers := min(t, tasks, max(1, 2*m*w.N*w.K/minFlopsPerWorker))
	if workers <= 1 {
		for task := 0; task < tasks; task++ {
			g.run(op, task)
		}
		return
	}
	var next atomic.Int64
	gw := g // captured by the workers (a heap copy only on this path)
	work := func() {
		for {
			task := int(next.Add(1) - 1)
			if task >= tasks {
				return
			}
			gw.run(op, task)
		}
	}
	var wg sync.WaitGroup
	wg.Add(workers - 1)
	for range workers - 1 {
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}

var gemmOpPool = sync.Pool{New: func() any { return new(gemmOp) }}

// linearGrid is linearImpl's task grid: task i is column block i/mb (ppb panels) × row block
// i%mb (tpb micro-tiles of mt rows).
type linearGrid struct{ mb, ppb, tpb, mt, m, n int }

func (g *linearGrid) run(op *gemmOp, task int) {
	ci, ri := task/g.mb, task%g.mb
	c0, c1 := ci*g.ppb*panelWidth, min((ci+1)*g.ppb*panelWidth, g.n)
	r0, r1 := ri*g.tpb*g.mt, min((ri+1)*g.tpb*g.mt, g.m)
	op.block(r0, r1, c0, c1, g.mt)
}

// peakRun runs n iterations of 12 independent register-resident chains — FMA, or VDPBF16PS
// when dot — and returns the FLOPs of one iteration (0 when the ISA has none).
func peakRun(isa isaLevel, dot bool, n int) (flopsPerIter float64) {
	switch {
	case dot && isa >= isaAVX512BF16:
		peakDotAvx512(n)
		return 12 * 16 * 4
	case dot:
		return 0
	case isa >= isaAVX512:
		peakF32Avx512(n)
		return 12 * 16 * 2
	case isa == isaAVX2:
		peakF32Avx2(n)
		return 12 * 8 * 2
	}
	return 0
}
