//go:build !purego

package kernels

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/cpu"
)

// cpuISA is the most capable level this CPU and OS support (x/sys/cpu checks the OS saves the
// wider registers; AMX also needs the kernel's permission, requested here once at start-up).
var cpuISA = detectISA()

// isaOverride lowers the level in use (tests and benchmarks compare implementations on one
// machine); 0 means none.
var isaOverride atomic.Int32

func detectISA() isaLevel {
	x := cpu.X86
	if x.HasAVX512F && x.HasAVX512BF16 && x.HasAMXTile && x.HasAMXBF16 && requestAMX() {
		return isaAMX
	} else if x.HasAVX512F && x.HasAVX512BF16 {
		return isaAVX512BF16
	} else if x.HasAVX512F {
		return isaAVX512
	} else if x.HasAVX2 && x.HasFMA {
		return isaAVX2
	}
	return isaGeneric
}

func init() {
	// KERNELS_ISA=avx2|avx512|avx512bf16|generic caps the level, e.g. to benchmark the fallback paths.
	switch os.Getenv("KERNELS_ISA") {
	case "avx512bf16":
		setISA(isaAVX512BF16)
	case "generic":
		setISA(isaGeneric)
	case "avx2":
		setISA(isaAVX2)
	case "avx512":
		setISA(isaAVX512)
	}
}

// activeISA is the level the kernels use now: the CPU's, unless lowered by setISA.
func activeISA() isaLevel {
	if o := isaOverride.Load(); o > 0 {
		return min(isaLevel(o-1), cpuISA)
	}
	return cpuISA
}

// setISA caps the level in use at l (never above the CPU's) and returns the previous level.
func setISA(l isaLevel) isaLevel {
	prev := activeISA()
	isaOverride.Store(int32(l) + 1)
	return prev
}
