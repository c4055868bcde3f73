//go:build !purego

package kernels

//go:noescape
func ropeAVX512(x, cos, sin *float32, half, heads int)

//go:noescape
func ropeAVX2(x, cos, sin *float32, half, heads int)

// ropeRowAsm rotates the heads of one row with AVX-512, or with AVX2 when half is a multiple of
// 8 (every Qwen head dim); false otherwise. The AVX2 kernel does the AVX-512 one's arithmetic
// (a product, then a fused multiply-add) 8 lanes at a time.
func ropeRowAsm(row, c, s []float32, heads, half int) bool {
	if half == 0 || heads == 0 {
		return false
	}
	switch {
	case haveAVX512Elementwise():
		_, _, _ = row[heads*2*half-1], c[half-1], s[half-1]
		ropeAVX512(&row[0], &c[0], &s[0], half, heads)
		return true
	case haveActAsm() && half%8 == 0:
		_, _, _ = row[heads*2*half-1], c[half-1], s[half-1]
		ropeAVX2(&row[0], &c[0], &s[0], half, heads)
		return true
	}
	return false
}
