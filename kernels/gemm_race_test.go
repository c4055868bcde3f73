//go:build race

package kernels

// raceEnabled trims the shape sweeps under the race detector, which slows the float64
// reference checks tenfold; the numerics are covered by the plain run, the concurrency here.
const raceEnabled = true
