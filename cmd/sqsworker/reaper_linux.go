package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// reapEvery is how often the reaper looks for zombies.
const reapEvery = time.Second

// startReaper starts reaping the zombies sqsworker inherits when it runs as
// PID 1, a container's init (without tini, docker run --init or ECS's
// initProcessEnabled): a process whose parent exits (a command's
// background job, the grandchild of a command killed with its group) is
// handed to PID 1, and stays a zombie, holding its process ID, until PID 1
// waits for it. stop stops the reaper and waits for it.
//
// It waits only for the zombies no one else waits for: os/exec waits for
// each command sqsworker starts as soon as it exits, so a zombie child of
// sqsworker seen in two scans in a row is one it inherited. Waiting for
// any child (wait4(-1)) would steal those commands' exit statuses.
func startReaper(log *slog.Logger) (stop func()) {
	r := &reaper{pid: os.Getpid(), proc: "/proc", log: log, seen: map[int]bool{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(reapEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.scan()
			case <-done:
				return
			}
		}
	})
	log.Info("running as PID 1: reaping the orphaned processes handed to sqsworker")
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// reaper waits for the zombie children of pid no one else waits for.
type reaper struct {
	pid  int
	proc string // where procfs is mounted
	log  *slog.Logger
	seen map[int]bool // the zombie children the last scan found
	wait func(pid int) error
}

// scan waits for the zombie children of r.pid that the last scan found
// too, and remembers the others.
func (r *reaper) scan() {
	now := map[int]bool{}
	for _, pid := range zombieChildren(r.proc, r.pid) {
		if !r.seen[pid] {
			now[pid] = true
			continue
		}
		wait := r.wait
		if wait == nil {
			wait = reap
		}
		if err := wait(pid); err != nil {
			r.log.Debug("reaping a zombie process failed", "pid", pid, "error", err)
		}
	}
	r.seen = now
}

// reap waits for the exited child pid.
func reap(pid int) error {
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	return err
}

// zombieChildren lists the processes of procfs at proc whose parent is
// ppid and that have exited (state Z) but were not waited for.
func zombieChildren(proc string, ppid int) []int {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		state, parent, ok := parseStat(b)
		if ok && state == 'Z' && parent == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// parseStat reads the state and the parent's ID from the text of
// /proc/PID/stat: "PID (COMM) STATE PPID ...", where COMM may hold spaces
// and parentheses.
func parseStat(b []byte) (state byte, ppid int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}
