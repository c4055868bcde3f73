//go:build purego

package model

// puregoBuild: the kernels are the pure-Go references alone (KERNELS_ISA has no effect).
const puregoBuild = true
