//go:build unix

package chaos

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// proc is a worker process, the leader of its own process group.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when the process has exited and been reaped
	err     error         // cmd.Wait's, once done is closed
	// signalled is set before the runner stops the process, so that its
	// exit is not taken for a crash.
	signalled atomic.Bool
}

// startProc starts bin with args and env in a process group of its own,
// its output to out. The process is killed if the runner dies (Pdeathsig,
// where the system has it).
func startProc(bin string, args, env []string, out io.Writer) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: starting %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() { // owned by p: ends when the process exits, which kill ensures
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process's ID, which is also its process group's.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode returns the exit status once the process has exited: its code,
// or -1 when a signal ended it.
func (p *proc) exitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// describeExit says how the process ended.
func (p *proc) describeExit() string {
	<-p.done
	if p.err == nil {
		return "exit 0"
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return p.err.Error()
}

// kill sends SIGKILL to the whole process group and waits for the process
// to exit.
func (p *proc) kill() {
	p.signalled.Store(true)
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

// terminate sends SIGTERM to the process group and waits up to timeout for
// the process to exit, then kills the group. It reports whether the process
// exited by itself, and how long that took.
func (p *proc) terminate(timeout time.Duration) (graceful bool, took time.Duration) {
	p.signalled.Store(true)
	start := time.Now()
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true, time.Since(start)
	case <-t.C:
		p.kill()
		return false, time.Since(start)
	}
}
