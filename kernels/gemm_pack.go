package kernels

// Panel layouts of the packed weights read by the assembly micro-kernels. Output features are
// grouped by 32 (one AVX-512 register pair); the last panel is zero-padded.
//
//	f32:  p32[p·K·32 + k·32 + c]              = W[32p+c, k]
//	bf16: p16[p·Kp·64 + (k/2)·64 + 2c + k%2]  = W[32p+c, k], Kp = ceil(K/2) rounded up to 16
//
// so one k step of a panel is 128 contiguous bytes in both: 32 f32, or 32 columns × one k-pair
// of bf16 (what VDPBF16PS multiplies, and what a shift or a mask widens to f32). Each bf16 panel
// ends with zero pairs up to a multiple of 16: an AMX B tile is 16 k-pairs tall, and its
// configuration cannot change within a product, so a ragged last step reads zeros, not the next
// panel (or past the slice).
const panelWidth = 32

func numPanels(n int) int { return (n + panelWidth - 1) / panelWidth }

func packF32(w []float32, n, k int) []float32 {
	out := make([]float32, numPanels(n)*panelWidth*k)
	for j := 0; j < n; j++ {
		p, c := j/panelWidth, j%panelWidth
		dst := out[p*panelWidth*k+c:]
		for kk, v := range w[j*k : (j+1)*k] {
			dst[kk*panelWidth] = v
		}
	}
	return out
}

// bf16PanelPairs is the k-pair rows of one packed bf16 panel: ceil(K/2) rounded up to 16.
func bf16PanelPairs(k int) int { return ((k+1)/2 + 15) &^ 15 }

func packBF16(w []uint16, n, k int) []uint16 {
	kp := bf16PanelPairs(k)
	out := make([]uint16, numPanels(n)*kp*2*panelWidth)
	for j := 0; j < n; j++ {
		p, c := j/panelWidth, j%panelWidth
		dst := out[p*kp*2*panelWidth+2*c:]
		for kk, v := range w[j*k : (j+1)*k] {
			dst[(kk>>1)*2*panelWidth+kk&1] = v
		}
	}
	return out
}
