//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// processesOf returns the live processes whose environment says they work
// on message id: the commands run started for it, and whatever those
// started.
func processesOf(t *testing.T, id string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte("\x00SQS_MESSAGE_ID="+id+"\x00")) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

// A command still running at the handler timeout is stopped with every
// process it started (its process group), before its message is retried or
// dead-lettered: sh -c 'sleep 37; echo done' leaves no sleep behind, and
// one that ignores SIGTERM is killed --kill-after later.
func TestRunTimeoutStopsTheProcessGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
	}{
		{"term", "sleep 37; echo done"},
		{"ignores-term", `trap "" TERM; sleep 37; echo done`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := localtest.NewSQS(t)
			q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 1})
			id := localtest.Send(t, c, q.URL, "", "slow")[0]
			started := filepath.Join(t.TempDir(), "started")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--handler-timeout", "2s", "--kill-after", "2s",
				"--", "sh", "-c", "touch "+started+"; "+tc.script)
			dead := dlqBodies(t, c, q, 1)
			if _, err := os.Stat(started); err != nil {
				t.Fatalf("the command did not start: %v; stderr:\n%s", err, p.stderr.String())
			}
			// The message is dead-lettered once its command is stopped: no
			// process of its group may be left by then.
			if left := processesOf(t, id); len(left) > 0 {
				t.Errorf("processes left after the message was dead-lettered: %q", left)
			}
			m := dead["slow"]
			if class := attr(m, sqsworker.AttrFailureClass); class != "String:timeout" {
				t.Errorf("error class %s, want timeout", class)
			}
			if e := attr(m, sqsworker.AttrFailureError); !strings.Contains(e, "handler timeout (2s)") {
				t.Errorf("error %s", e)
			}
			cancel()
			if code := p.wait(t); code != 0 {
				t.Errorf("exit %d; stderr:\n%s", code, p.stderr.String())
			}
		})
	}
}

// On Ctrl-C, run waits for its commands; a second Ctrl-C kills them at once
// (process groups and all) and makes their messages visible again, and run
// exits 130.
func TestRunSecondInterruptStopsNow(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 10 * time.Minute})
	id := localtest.Send(t, c, q.URL, "", "stubborn")[0]
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	now := make(chan struct{})
	// Neither the shutdown nor SIGTERM would end it within the test.
	p := startCLI(t, withStopNow(ctx, now), "", "run", q.URL, "--wait", "1s", "--shutdown-timeout", "1h", "--kill-after", "1h",
		"--", "sh", "-c", `trap "" TERM; touch `+started+`; sleep 600`)
	localtest.Eventually(t, 60*time.Second, func() bool { _, err := os.Stat(started); return err == nil },
		"the command did not start; stderr:\n%s", p.stderr.String())
	interrupt()
	localtest.Eventually(t, 60*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "waiting up to 1s for the long poll, and up to 1h0m0s in all for running handlers; Ctrl-C again to stop now")
	}, "no word of the shutdown; stderr:\n%s", p.stderr.String())
	if len(processesOf(t, id)) == 0 {
		t.Fatal("the command did not wait for its shutdown deadline")
	}
	close(now)
	if code := p.wait(t); code != exitInterrupted {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitInterrupted, p.stderr.String())
	}
	if left := processesOf(t, id); len(left) > 0 {
		t.Errorf("processes left: %q", left)
	}
	// Released at once, not after the 10 minutes of its visibility timeout.
	got := receiveBodies(t, c, q.URL, 1)
	if _, ok := got["stubborn"]; !ok {
		t.Errorf("the message is not visible again: %v", got)
	}
}

// An attribute too large for the environment of a command fails its message
// at once, as permanent, naming the attribute: no retry could pass it.
func TestRunAttributeTooLargeIsPermanent(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	sendWithAttrs(t, c, q.URL, "big", map[string]string{"blob": strings.Repeat("x", 130<<10)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--", "sh", "-c", "cat >/dev/null")
	m := dlqBodies(t, c, q, 1)["big"]
	cancel()
	p.wait(t)
	if a := attr(m, sqsworker.AttrFailureAttempts); a != "Number:1" {
		// Tell a second copy (the first move landed, the delete of the
		// original did not) from a first move that failed: the copies
		// received above are in flight.
		v, f, d := localtest.Depth(t, c, q.DLQURL)
		t.Errorf("dead-lettered after %s attempts, want 1; the dead-letter queue holds %d messages; the command line's log:\n%s",
			a, v+f+d, p.stderr.String())
	}
	if class := attr(m, sqsworker.AttrFailureClass); class != "String:environment-too-large" {
		t.Errorf("error class %s", class)
	}
	if e := attr(m, sqsworker.AttrFailureError); !strings.Contains(e, `attribute "blob" is too large for the command's environment`) {
		t.Errorf("error %s", e)
	}
}

// A command the system refuses to start for the size of its environment
// (E2BIG) fails as permanent, with the reason.
func TestCommandEnvironmentTooLarge(t *testing.T) {
	env := os.Environ()
	for i := range 40 { // 40 variables of 100 KiB: over ARG_MAX, each under MAX_ARG_STRLEN
		env = append(env, fmt.Sprintf("FILLER_%d=%s", i, strings.Repeat("y", 100<<10)))
	}
	var out bytes.Buffer
	h := &commandHandler{path: "/bin/sh", args: []string{"-c", "true"}, env: env, out: &out, killAfter: time.Second}
	err := h.HandleMessage(context.Background(), &sqsworker.Message{ID: "m-1", Body: "x", ReceiveCount: 1})
	if !errors.Is(err, syscall.E2BIG) {
		t.Fatalf("err = %v, want E2BIG", err)
	}
	var perm *sqsworker.PermanentError
	if !errors.As(err, &perm) || sqsworker.ErrorClass(err) != "environment-too-large" || !strings.Contains(err.Error(), "over the system's limit") {
		t.Errorf("err = %v (class %s), want a permanent environment-too-large", err, sqsworker.ErrorClass(err))
	}
}

// As PID 1 (a container's init), run reaps the orphans handed to it: the
// background jobs of its commands do not stay zombies.
func TestRunAsPID1ReapsOrphans(t *testing.T) {
	t.Parallel()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	if out, err := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a PID namespace here: %v %s", err, out)
	}
	bin := buildSQSWorker(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, q.URL, "", "a", "b", "c")
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--kill-child", bin,
		"run", q.URL, "--wait", "1s", "--", "sh", "-c", "(sleep 0.2; true) & exit 0")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// unshare ignores SIGTERM while its child runs; killed, it kills
		// its child (--kill-child), and the namespace ends with it.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	emptyEventually(t, c, q.URL)
	if !strings.Contains(stderr.String(), "running as PID 1") {
		t.Errorf("sqsworker did not run as PID 1; stderr:\n%s", stderr.String())
	}
	// sqsworker is the child of unshare; its zombies are its children in
	// state Z.
	var pid1 int
	localtest.Eventually(t, 30*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if err != nil {
			return false
		}
		pid1, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, "no sqsworker under unshare")
	localtest.Eventually(t, 30*time.Second, func() bool { return len(zombieChildren("/proc", pid1)) == 0 },
		"zombies left: %v; stderr:\n%s", zombieChildren("/proc", pid1), stderr.String())
}

func TestParseStat(t *testing.T) {
	for in, want := range map[string]struct {
		state byte
		ppid  int
		ok    bool
	}{
		"42 (sleep) Z 1 42 42 0":         {'Z', 1, true},
		"43 (a (b) c) S 7 43 43 0":       {'S', 7, true},
		"44 (x) R":                       {0, 0, false},
		"garbage":                        {0, 0, false},
		"45 (sh) Z notanumber 45 45 0 0": {0, 0, false},
	} {
		s, p, ok := parseStat([]byte(in))
		if s != want.state || p != want.ppid || ok != want.ok {
			t.Errorf("parseStat(%q) = %q, %d, %v; want %q, %d, %v", in, s, p, ok, want.state, want.ppid, want.ok)
		}
	}
}

// The reaper waits only for zombies seen in two scans in a row: those of
// the commands run starts, os/exec waits for at once.
func TestReaperWaitsForInheritedZombiesOnly(t *testing.T) {
	proc := t.TempDir()
	write := func(pid int, stat string) {
		d := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(10, "10 (sleep) Z 1 10 10 0")
	write(11, "11 (sleep) S 1 11 11 0")
	write(12, "12 (sleep) Z 5 12 12 0")
	var reaped []int
	r := &reaper{pid: 1, proc: proc, log: slog.New(slog.DiscardHandler), seen: map[int]bool{}, wait: func(pid int) error {
		reaped = append(reaped, pid)
		return os.RemoveAll(filepath.Join(proc, strconv.Itoa(pid)))
	}}
	r.scan()
	if len(reaped) != 0 {
		t.Fatalf("reaped %v at first sight", reaped)
	}
	write(13, "13 (sh) Z 1 13 13 0") // exited since: waited for by os/exec before the next scan
	r.scan()
	if fmt.Sprint(reaped) != "[10]" {
		t.Errorf("reaped %v, want [10]", reaped)
	}
}

// The process as a whole: Ctrl-C (SIGINT) starts the graceful shutdown,
// which waits for the command; a second Ctrl-C kills it and sqsworker exits
// 130.
func TestRunCtrlCTwice(t *testing.T) {
	t.Parallel()
	bin := buildSQSWorker(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 10 * time.Minute})
	id := localtest.Send(t, c, q.URL, "", "stubborn")[0]
	started := filepath.Join(t.TempDir(), "started")
	cmd := exec.Command(bin, "run", q.URL, "--wait", "1s", "--shutdown-timeout", "1h", "--kill-after", "1h",
		"--", "sh", "-c", `trap "" TERM INT; touch `+started+`; sleep 600`)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	localtest.Eventually(t, 60*time.Second, func() bool { _, err := os.Stat(started); return err == nil },
		"the command did not start; stderr:\n%s", stderr.String())
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 60*time.Second, func() bool { return strings.Contains(stderr.String(), "Ctrl-C again to stop now") },
		"no word of the shutdown; stderr:\n%s", stderr.String())
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("sqsworker exited at the first Ctrl-C (%v); stderr:\n%s", err, stderr.String())
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
	case <-time.After(2 * time.Minute):
		t.Fatalf("sqsworker did not stop at the second Ctrl-C; stderr:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitInterrupted, stderr.String())
	}
	if left := processesOf(t, id); len(left) > 0 {
		t.Errorf("processes left: %q", left)
	}
	if got := receiveBodies(t, c, q.URL, 1); len(got) != 1 {
		t.Errorf("the message is not visible again: %v", got)
	}
}

// A command's graceful stop, with its SIGTERM-to-SIGKILL grace, ends within
// the worker's default shutdown timeout (25s, under ECS's default 30s stop
// timeout): --shutdown-timeout's default for a command is 25s less
// --kill-after. Before, it was 25s, and with the default --kill-after of
// 10s a command ignoring SIGTERM held the stop for 35s: ECS killed
// sqsworker first, and the message stayed hidden for its visibility
// timeout. Here --kill-after 22s leaves 3s for the handlers, and the
// command, which ignores SIGTERM, is killed 22s after them; the message is
// then visible again at once.
func TestRunCommandStopFitsWithinTheShutdownTimeout(t *testing.T) {
	t.Parallel()
	if got := commandShutdownTimeout(defaultKillAfter); got != 15*time.Second {
		t.Errorf("default shutdown timeout of a command %s, want 15s", got)
	}
	if got := commandShutdownTimeout(time.Hour); got != time.Second {
		t.Errorf("shutdown timeout with --kill-after 1h %s, want 1s", got)
	}
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 10 * time.Minute})
	id := localtest.Send(t, c, q.URL, "", "stubborn")[0]
	started := filepath.Join(t.TempDir(), "started")
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--kill-after", "22s",
		"--", "sh", "-c", `trap "" TERM; touch `+started+`; sleep 600`)
	localtest.Eventually(t, 60*time.Second, func() bool { _, err := os.Stat(started); return err == nil },
		"the command did not start; stderr:\n%s", p.stderr.String())
	interrupt()
	localtest.Eventually(t, 60*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "waiting up to 1s for the long poll, and up to 3s in all for running handlers")
	}, "the shutdown does not wait 25s less --kill-after; stderr:\n%s", p.stderr.String())
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d, want 0 (a graceful stop); stderr:\n%s", code, p.stderr.String())
	}
	if left := processesOf(t, id); len(left) > 0 {
		t.Errorf("processes left: %q", left)
	}
	got := receiveBodies(t, c, q.URL, 1)
	if _, ok := got["stubborn"]; !ok {
		t.Errorf("the message is not visible again: %v", got)
	}
}
