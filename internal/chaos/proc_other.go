//go:build !unix

package chaos

import (
	"errors"
	"io"
	"sync/atomic"
	"time"
)

// proc is a worker process; the chaos runner needs Unix process groups.
type proc struct {
	started   time.Time
	done      chan struct{}
	signalled atomic.Bool
}

func startProc(bin string, args, env []string, out io.Writer) (*proc, error) {
	return nil, errors.New("chaos: the runner needs a Unix system (process groups, kill -9)")
}

func (p *proc) pid() int                                      { return 0 }
func (p *proc) exited() bool                                  { return true }
func (p *proc) exitCode() int                                 { return -1 }
func (p *proc) describeExit() string                          { return "not started" }
func (p *proc) kill()                                         {}
func (p *proc) terminate(time.Duration) (bool, time.Duration) { return false, 0 }
