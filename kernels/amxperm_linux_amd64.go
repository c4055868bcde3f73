//go:build !purego

package kernels

import "golang.org/x/sys/unix"

// requestAMX asks Linux for permission to use the AMX tile data state (XTILEDATA, feature 18):
// since Linux 5.16 a process must request it before its first tile instruction, or that
// instruction faults. The permission is process-wide and covers threads started later.
func requestAMX() bool {
	const archReqXcompPerm, xfeatureXTileData = 0x1023, 18
	_, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXTileData, 0)
	return errno == 0
}
