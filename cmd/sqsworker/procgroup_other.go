//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// inOwnProcessGroup does nothing where there are no process groups.
func inOwnProcessGroup(*exec.Cmd) {}

// signalGroup ends the process pgid: without process groups, only the
// command itself can be signalled, and only killed.
func signalGroup(pgid int, _ syscall.Signal) error {
	p, err := os.FindProcess(pgid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// groupExists is false: once the command has exited, nothing is left to
// wait for.
func groupExists(int) bool { return false }
