//go:build unix

package main

import (
	"errors"
	"os/exec"
	"syscall"
)

// inOwnProcessGroup makes cmd start a process group of its own, so that
// the processes it starts can be signalled with it, and so that a Ctrl-C in
// sqsworker's terminal reaches sqsworker only.
func inOwnProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to every process of the group pgid.
func signalGroup(pgid int, sig syscall.Signal) error {
	return syscall.Kill(-pgid, sig)
}

// groupExists reports whether a process of the group pgid is still there
// (an exited one that its parent has not reaped yet counts).
func groupExists(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
