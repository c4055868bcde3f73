//go:build !amd64 || purego

package kernels

func haveActAsm() bool { return false }

func expScaleSumAsm(x []float32, scale, sub float32) (int, float32) { return 0, 0 }
func maxAsm(x []float32) (int, float32)                             { return 0, 0 }
func siluMulAsm(dst, gate, up []float32) int                        { return 0 }
func mixAsm(dst, x []float32, a, b float32) int                     { return 0 }
func scaleAsm(dst, x []float32, s float32) int                      { return 0 }
