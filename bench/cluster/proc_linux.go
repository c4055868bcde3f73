//go:build linux

package cluster

import (
	"os/exec"
	"runtime"
	"syscall"
)

// sysProcAttr puts the child in its own process group and asks the kernel to SIGKILL it when
// the supervisor dies, so a crashed or killed `bench cluster` leaves nothing behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// startLocked starts cmd from a locked OS thread. Pdeathsig fires when the *thread* that forked
// the child exits; the Go runtime only ends threads whose goroutine exits while locked, and this
// one unlocks, so the thread outlives the call and the signal means "the supervisor died".
func startLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
