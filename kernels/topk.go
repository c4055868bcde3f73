package kernels

// TopK writes the k largest values of probs to w and their indices to idx, largest first; equal
// values keep ascending index order (the first occurrence ranks higher), so the router's choice
// is deterministic. NaNs are never selected while enough other values exist. k is clamped to
// len(probs), len(idx) and len(w); it returns the number written.
//
// It keeps the running top k in a small sorted array and compares each value with the current
// k-th only: O(n) for the router's n = 60…128 experts and k = 4…8, with no allocation.
func TopK(probs []float32, k int, idx []int32, w []float32) int {
	k = min(k, len(probs), len(idx), len(w))
	if k <= 0 {
		return 0
	}
	n := 0 // entries filled
	for i, p := range probs {
		if p != p { // NaN
			continue
		}
		if n == k {
			if p <= w[k-1] {
				continue
			}
			n-- // drop the smallest
		}
		// Insert after every entry ≥ p (stable for ties: earlier index first).
		j := n
		for j > 0 && w[j-1] < p {
			w[j] = w[j-1]
			idx[j] = idx[j-1]
			j--
		}
		w[j] = p
		idx[j] = int32(i)
		n++
	}
	// Fewer than k non-NaN values: fill with the NaN positions, in index order.
	for i := 0; n < k && i < len(probs); i++ {
		if probs[i] != probs[i] {
			w[n], idx[n] = probs[i], int32(i)
			n++
		}
	}
	return n
}
