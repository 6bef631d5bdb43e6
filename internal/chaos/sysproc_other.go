//go:build unix && !linux

package chaos

import "syscall"

// sysProcAttr puts a worker in a process group of its own, which the runner
// signals as a whole.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
