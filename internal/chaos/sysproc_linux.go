package chaos

import "syscall"

// sysProcAttr puts a worker in a process group of its own, which the runner
// signals as a whole, and has the kernel kill it if the runner dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
