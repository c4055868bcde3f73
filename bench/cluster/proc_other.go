//go:build !linux

package cluster

import (
	"os/exec"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func startLocked(cmd *exec.Cmd) error { return cmd.Start() }

func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }
