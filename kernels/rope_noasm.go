//go:build !amd64 || purego

package kernels

func ropeRowAsm(row, c, s []float32, heads, half int) bool { return false }
