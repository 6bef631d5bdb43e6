package localtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RIEFunctionTimeout is the AWS_LAMBDA_FUNCTION_TIMEOUT, in seconds, StartRIE
// gives the RIE unless its env sets one.
const RIEFunctionTimeout = 30

// RIE is a Lambda function bootstrap running, for a test, under the AWS
// Lambda Runtime Interface Emulator (RIE): the module
// github.com/aws/aws-lambda-runtime-interface-emulator at the version pinned
// in the Makefile, installed in bin/tools by `make tools`. What follows was
// found in its source (internal/lambda/rie, rapidcore) and by running it.
//
// Flags: --runtime-interface-emulator-address, the invoke API (default
// 0.0.0.0:8080, every interface: StartRIE always passes a loopback address);
// --runtime-api-address, the Runtime API the bootstrap polls (default
// 127.0.0.1:9001); --log-level. Unknown flags, --help included, are ignored:
// the RIE then starts on its defaults. The arguments after the flags are the
// bootstrap command (with more than one, the last is also taken as the
// handler, _HANDLER). Both servers bind exactly the address given, and both
// listen from start-up.
//
// Environment the RIE reads: AWS_LAMBDA_FUNCTION_TIMEOUT (seconds, default
// 300; StartRIE sets 30), AWS_LAMBDA_FUNCTION_NAME (default test_function,
// also in the ARN arn:aws:lambda:us-east-1:012345678912:function:NAME),
// AWS_LAMBDA_FUNCTION_MEMORY_SIZE (3008), AWS_LAMBDA_FUNCTION_VERSION
// ($LATEST), LOG_LEVEL (info).
//
// The bootstrap gets the RIE's whole environment, plus
// AWS_LAMBDA_RUNTIME_API and the function name, memory size and version
// (the defaults above unless set), and AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN always, empty when the RIE has
// none. Its working directory is the RIE's: StartRIE runs the RIE in the
// bootstrap's directory, as Lambda runs it in /var/task. Its stdout and
// stderr go to the RIE's, so into the log.
//
// The bootstrap is started at the first invoke (INIT), not when the RIE
// starts, so the first invoke carries the cold start. The handler's context
// deadline is the invoke's start plus AWS_LAMBDA_FUNCTION_TIMEOUT, the very
// moment the RIE times the invoke out: a handler that answers when its
// context ends races the timeout, and either may win.
//
// What an invoke returns, for a Go function (aws-lambda-go):
//
//   - success: 200, the handler's result as JSON;
//   - the handler returns an error, or the event does not unmarshal into
//     the handler's argument (the Go runtime's decoding error, e.g. for a
//     body that is not JSON): 200 too, with the body
//     {"errorMessage":"invalid character 'o' in literal null (expecting 'u')","errorType":"SyntaxError"}
//     (errorType is the error's type name without package: errorString for
//     errors.New). There is no X-Amz-Function-Error header as the real
//     Invoke API sends: tell errors by the body;
//   - the handler panics: 502, {"errorMessage":"…","errorType":"string",
//     "stackTrace":[{"path":…,"line":…,"label":…},…]} (errorType is the
//     panic value's type name); the process exits, and the next invoke
//     starts it again (a new cold start);
//   - the handler runs past the timeout: 200, the text (not JSON) "Task
//     timed out after 30.00 seconds"; the RIE kills the process and the
//     next invoke starts it again. An invoke that comes while the RIE
//     ends that reset may be refused before the function starts (502,
//     Sandbox.Failure, ErrGateCanceled in its log); Invoke sends it again,
//     up to four times.
//
// Every response is Content-Type text/plain. The RIE crashes (a nil
// dereference in rapidcore.(*Server).Invoke, after "ReserveFailed:
// AlreadyReserved") when an invoke comes while another is running, so
// Invoke calls are serialised. On SIGTERM it kills the bootstrap (SIGKILL,
// without SIGTERM first) and exits, in milliseconds. The bootstrap runs in a
// process group of its own; one left behind by a killed RIE exits by itself
// when its Runtime API connection breaks.
type RIE struct {
	invokeAddr string
	apiAddr    string
	cmd        *exec.Cmd
	logPath    string
	logFile    *os.File
	exited     chan struct{}
	transport  *http.Transport
	client     *http.Client
	stopOnce   sync.Once

	// invoking is a one-slot semaphore, a mutex that a waiting Invoke can
	// give up on when its context ends: it serialises invokes, which the
	// RIE does not survive in parallel.
	invoking chan struct{}
}

// BuildBootstrap builds the package pkg (an import path, such as
// "github.com/sqsworker/sqsworker/cmd/example-lambda", or a path relative to
// the test's directory) for this machine, as a Lambda bootstrap:
// CGO_ENABLED=0, -tags lambda.norpc, -trimpath. It returns the path of the
// executable, t.TempDir()/bootstrap.
func BuildBootstrap(t testing.TB, pkg string) string {
	t.Helper()
	// go test puts the GOROOT/bin of the go command that runs it first on
	// the test's PATH, so "go" is that same toolchain.
	out := filepath.Join(t.TempDir(), "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the bootstrap %s: %v\n%s", pkg, err, b)
	}
	return out
}

// RequireRIE returns the path of the RIE that `make tools` installs, in the
// repository's bin/tools. When it is not there, it skips the test, or fails
// it in CI (CI set), where `make test` installs it. It skips the test on
// systems other than Linux, the only one the RIE runs on.
func RequireRIE(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("the Lambda Runtime Interface Emulator runs on Linux only, not %s", runtime.GOOS)
	}
	root, err := repoRoot()
	if err == nil {
		p := filepath.Join(root, "bin", "tools", "aws-lambda-rie")
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no Lambda Runtime Interface Emulator (%v): run `make tools`, which installs it in bin/tools", err)
	}
	t.Skipf("no Lambda Runtime Interface Emulator (%v); run `make tools`", err)
	return ""
}

// StartRIE runs bootstrap under the RIE, on two free loopback ports, and
// waits until it accepts invokes. The RIE, and so the function, gets the
// test's environment, then AWS_LAMBDA_FUNCTION_TIMEOUT=30 unless the test's
// environment sets it, then env ("NAME=value" entries, which win: e.g.
// AWS_ENDPOINT_URL_SQS, AWS_LAMBDA_FUNCTION_TIMEOUT,
// AWS_LAMBDA_FUNCTION_NAME). The RIE's output, the function's included, goes
// to a log file, which the test's log shows when the test fails. The RIE is
// stopped when the test ends.
//
// It skips or fails the test as RequireRIE does when the RIE is not
// installed.
func StartRIE(t testing.TB, bootstrap string, env ...string) *RIE {
	t.Helper()
	rie := RequireRIE(t)
	bootstrap, err := filepath.Abs(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 2)
	r := &RIE{
		invokeAddr: "127.0.0.1:" + strconv.Itoa(ports[0]),
		apiAddr:    "127.0.0.1:" + strconv.Itoa(ports[1]),
		exited:     make(chan struct{}),
		invoking:   make(chan struct{}, 1),
	}
	r.transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, DisableCompression: true}
	r.client = &http.Client{Transport: r.transport}
	r.logFile, err = os.CreateTemp(t.TempDir(), "aws-lambda-rie-*.log")
	if err != nil {
		t.Fatal(err)
	}
	r.logPath = r.logFile.Name()

	r.cmd = exec.Command(rie,
		"--runtime-interface-emulator-address", r.invokeAddr,
		"--runtime-api-address", r.apiAddr,
		bootstrap)
	r.cmd.Dir = filepath.Dir(bootstrap)
	r.cmd.Env = append([]string{"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(RIEFunctionTimeout)}, os.Environ()...)
	r.cmd.Env = append(r.cmd.Env, env...) // exec.Cmd keeps the last value of a name
	r.cmd.Stdout, r.cmd.Stderr = r.logFile, r.logFile
	if err := r.cmd.Start(); err != nil {
		r.logFile.Close()
		t.Fatalf("starting %s (run `make tools`): %v", rie, err)
	}
	go func() {
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			t.Logf("aws-lambda-rie log (%s):\n%s", r.logPath, tail(r.Log(), 64<<10))
		}
	})

	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.invokeAddr, time.Second)
		if err == nil {
			c.Close()
			return r
		}
		select {
		case <-r.exited:
			t.Fatalf("aws-lambda-rie exited at start-up (%v):\n%s", r.cmd.ProcessState, r.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("aws-lambda-rie did not listen on %s: %v\n%s", r.invokeAddr, err, r.Log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// URL returns the URL that invokes the function.
func (r *RIE) URL() string {
	return "http://" + r.invokeAddr + "/2015-03-31/functions/function/invocations"
}

// RuntimeAPI returns the address of the Runtime API the function polls, its
// AWS_LAMBDA_RUNTIME_API.
func (r *RIE) RuntimeAPI() string { return r.apiAddr }

// Invoke invokes the function with payload as the event, and returns the
// RIE's status code and body; see RIE for what they are on a
// function error, a panic and a timeout. err is for the HTTP exchange only.
//
// Invokes are serialised: an Invoke waits for the one running. When ctx ends
// first, Invoke returns ctx's error at once, but the invoke goes on in the
// RIE, and the next Invoke waits for it to end (at the latest at the
// function's timeout).
func (r *RIE) Invoke(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	select {
	case r.invoking <- struct{}{}:
	case <-ctx.Done():
		return 0, nil, fmt.Errorf("waiting for the running invoke: %w", ctx.Err())
	}
	type result struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-r.invoking }()
		var res result
		for try := 0; ; try++ {
			res.status, res.body, res.err = r.post(payload)
			// The RIE resets its runtime after a timeout or a crash; an
			// invoke that comes while the reset ends is refused at its
			// gate (ErrGateCanceled) before the function is started, and
			// the RIE resets again. The invoke never reached the function:
			// it is sent again, as Lambda would have run it.
			if res.err != nil || res.status != http.StatusBadGateway || !bytes.Contains(res.body, []byte("ErrGateCanceled")) || try == 4 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		done <- res
	}()
	select {
	case res := <-done:
		return res.status, res.body, res.err
	case <-ctx.Done():
		return 0, nil, fmt.Errorf("invoking: %w (the invoke goes on in the emulator)", ctx.Err())
	}
}

// post sends one invoke, not cancelled by the caller's context: the RIE
// would go on with it anyway.
func (r *RIE) post(payload []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, r.URL(), bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Log returns what the RIE and the function wrote so far.
func (r *RIE) Log() string {
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", r.logPath, err)
	}
	return string(b)
}

// Stop stops the RIE, which stops the function, and waits for it to exit:
// SIGTERM, then SIGKILL after 5s. StartRIE has it called when the test ends;
// later calls do nothing.
func (r *RIE) Stop() {
	r.stopOnce.Do(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		r.transport.CloseIdleConnections()
		r.logFile.Close()
	})
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n { // all held open until the end, so all differ
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// tail returns the last n bytes of s at most.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// repoRoot finds the repository's root, the folder holding go.mod, from the
// test's working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
