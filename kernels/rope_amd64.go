//go:build !purego

package kernels

//go:noescape
func ropeAVX512(x, cos, sin *float32, half, heads int)

// ropeRowAsm rotates the heads of one row with AVX-512; false when it is not available.
func ropeRowAsm(row, c, s []float32, heads, half int) bool {
	if !haveAVX512Elementwise() || half == 0 || heads == 0 {
		return false
	}
	_, _, _ = row[heads*2*half-1], c[half-1], s[half-1]
	ropeAVX512(&row[0], &c[0], &s[0], half, heads)
	return true
}
