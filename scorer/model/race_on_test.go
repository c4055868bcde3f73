//go:build race

package model

// raceBuild: the test binary runs under the race detector, which slows the pure-Go kernels
// tenfold and more.
const raceBuild = true
