package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/smithy-go/logging"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// runCLI runs the command line in-process, as main would, and returns what
// it printed and its exit code.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(strings.NewReader(stdin), &out, &errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err != nil {
		errOut.WriteString("sqsworker: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), exitCode(ctx, err)
}

// golden compares got with testdata/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var _ = io.Discard

// buildSQSWorker builds the command into a temporary directory, for tests
// of the process as a whole: signals, environment, exit status.
func buildSQSWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sqsworker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestUnknownOutputIsAUsageError(t *testing.T) {
	_, stderr, code := runCLI(t, "", "-o", "xml", "version")
	if code != 2 || !strings.Contains(stderr, `--output "xml"`) {
		t.Errorf("code %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "", "version", "--no-such-flag")
	if code != 2 || !strings.Contains(stderr, "no-such-flag") {
		t.Errorf("code %d, stderr %q", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	stdout, _, code := runCLI(t, "", "--version")
	if code != 0 || !strings.HasPrefix(stdout, "sqsworker ") {
		t.Errorf("--version: exit %d, %q", code, stdout)
	}
	v, _, _ := runCLI(t, "", "version")
	if v != stdout {
		t.Errorf("version says %q, --version %q", v, stdout)
	}
}

// Mistakes in the command line exit 2 and name the nearest command or flag.
func TestUsageErrorsSuggest(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"sedn", "jobs"}, `unknown command "sedn" for "sqsworker"; did you mean send?`},
		{[]string{"stat"}, "did you mean stats?"},
		{[]string{"nothing-like-it"}, `unknown command "nothing-like-it" for "sqsworker"; see sqsworker --help`},
		{[]string{"run", "jobs", "--conurrency", "3", "--", "true"}, "unknown flag: --conurrency; did you mean --concurrency?"},
		{[]string{"send", "jobs", "--idempotency", "k", "x"}, "did you mean --idempotency-key?"},
		{[]string{"send", "jobs", "--regoin", "eu-west-1", "x"}, "did you mean --region?"},
		{[]string{"queue", "create", "jobs", "--max-recieves", "3"}, "did you mean --max-receives?"},
		{[]string{"send", "jobs", "--zzzzzz"}, "unknown flag: --zzzzzz"},
	} {
		_, stderr, code := runCLI(t, "", tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

func TestRootHelpDocumentsExitStatus(t *testing.T) {
	stdout, _, code := runCLI(t, "", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Exit status:", "  2     a mistake in the command line", "  130   interrupted by Ctrl-C", "AWS_DEFAULT_REGION", "queue", "--quiet", "--version"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q:\n%s", want, stdout)
		}
	}
}

func TestExitCode(t *testing.T) {
	bg := context.Background()
	interrupted := func(sig os.Signal) context.Context {
		ctx, cancel := context.WithCancelCause(bg)
		cancel(interruptSignal{sig})
		return ctx
	}
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	for _, tt := range []struct {
		ctx  context.Context
		err  error
		want int
	}{
		{bg, nil, 0},
		{bg, errors.New("x"), 1},
		{bg, usageError{errors.New("x")}, 2},
		{interrupted(os.Interrupt), errors.New("x"), 130},
		{interrupted(syscall.SIGTERM), errors.New("x"), 143},
		{interrupted(os.Interrupt), usageError{errors.New("x")}, 2},
		{cancelled, errors.New("x"), 130},
		{bg, &interruptedError{"stopped"}, 130},
		{interrupted(os.Interrupt), nil, 0},
	} {
		if got := exitCode(tt.ctx, tt.err); got != tt.want {
			t.Errorf("exitCode(%v, %v) = %d, want %d", context.Cause(tt.ctx), tt.err, got, tt.want)
		}
	}
}

// cleanAWSEnv is the environment of the test without any AWS setting, nor
// a home with AWS files: only the SQS endpoint of the local stack is kept,
// so that nothing reaches AWS.
func cleanAWSEnv(t *testing.T, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	home := t.TempDir()
	return append(append(env, "HOME="+home, "AWS_CONFIG_FILE="+filepath.Join(home, "config"),
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, "credentials"), "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_SQS="+localtest.Endpoint()), extra...)
}

// A missing region, missing credentials or a wrong region are errors that
// say how to fix them.
func TestAWSConfigurationErrors(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	bin := buildSQSWorker(t)
	creds := []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"}
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	name := q.URL[strings.LastIndexByte(q.URL, '/')+1:]
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"no region", creds, []string{"send", name, "x"}, 1, []string{
			"sqsworker: no AWS region: pass --region, set AWS_REGION", `eval "$(localstack/stack.sh env)"`}},
		{"no credentials", []string{"AWS_REGION=us-east-1"}, []string{"send", name, "x"}, 1, []string{
			"sqsworker: no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", "--profile or AWS_PROFILE", "the SDK said:"}},
		{"unknown profile", append([]string{"AWS_REGION=us-east-1"}, creds...), []string{"--profile", "nosuch", "send", name, "x"}, 1, []string{
			`AWS profile "nosuch" is not in the shared config files`}},
		{"wrong region", append([]string{"AWS_REGION=eu-wst-1"}, creds...), []string{"send", "jobs-" + name, "x"}, 1, []string{
			"queue jobs-" + name + " does not exist in eu-wst-1 at " + localtest.Endpoint() + ": check the name and the region (--region or AWS_REGION), or create it: sqsworker queue create jobs-" + name}},
		{"AWS_DEFAULT_REGION", append([]string{"AWS_DEFAULT_REGION=us-east-1"}, creds...), []string{"send", name, "x"}, 0, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = cleanAWSEnv(t, tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "SDK 20") {
				t.Errorf("the SDK's own log lines reach stderr:\n%s", stderr.String())
			}
		})
	}
}

func TestQueueMissingErrorNamesTheFix(t *testing.T) {
	at := awsTarget{region: "us-east-1", endpoint: "https://sqs.us-east-1.amazonaws.com"}
	for _, tt := range []struct {
		queue string
		want  string
	}{
		{"jobs", "queue jobs does not exist in us-east-1 at https://sqs.us-east-1.amazonaws.com: check the name and the region (--region or AWS_REGION), or create it: sqsworker queue create jobs"},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/jobs", "queue https://sqs.eu-west-1.amazonaws.com/123456789012/jobs does not exist in us-east-1 at https://sqs.us-east-1.amazonaws.com: the URL is in eu-west-1; use --region eu-west-1"},
		{"https://sqs.us-east-1.amazonaws.com/123456789012/jobs", "does not exist in us-east-1 at https://sqs.us-east-1.amazonaws.com: check the URL and the region"},
	} {
		err := (&queueMissingError{queue: tt.queue, target: at, err: errors.New("QueueDoesNotExist")}).Error()
		if !strings.Contains(err, tt.want) {
			t.Errorf("%s: %q, want %q", tt.queue, err, tt.want)
		}
	}
	dns := fmt.Errorf("operation error SQS: GetQueueUrl: %w", &net.DNSError{Err: "no such host", Name: "sqs.eu-wst-1.amazonaws.com", IsNotFound: true})
	a := &app{aws: awsTarget{region: "eu-wst-1", endpoint: "https://sqs.eu-wst-1.amazonaws.com"}}
	if got := a.queueError("jobs", dns).Error(); !strings.Contains(got, `no SQS endpoint https://sqs.eu-wst-1.amazonaws.com: is "eu-wst-1" a region? (check --region or AWS_REGION)`) {
		t.Errorf("DNS failure: %s", got)
	}
	refused := fmt.Errorf("operation error SQS: GetQueueUrl: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED})
	a = &app{aws: awsTarget{region: "us-east-1", endpoint: "http://127.0.0.1:9324"}}
	if got := a.queueError("jobs", refused).Error(); !strings.Contains(got, "nothing answers at http://127.0.0.1:9324 (is the local stack running?") {
		t.Errorf("refused: %s", got)
	}
}

// The AWS SDK's own log lines are dropped when the CLI says better, and
// passed on as notes otherwise.
func TestSDKLogger(t *testing.T) {
	var out bytes.Buffer
	l := &sdkLogger{w: &out}
	l.Logf(logging.Warn, "falling back to IMDSv1: %v", "a timeout")
	l.Logf(logging.Warn, "failed to discard remaining HTTP response body, this may affect connection reuse: %v", "closed")
	l.Logf(logging.Warn, "Response has no supported checksum. Not validating response payload.")
	if out.Len() != 0 {
		t.Errorf("printed %q", out.String())
	}
	l.Logf(logging.Warn, "failed to parse response Date header value, got %v", "x")
	if want := "sqsworker: AWS SDK warn: failed to parse response Date header value, got x\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}

// The local stack's environment names the region for the AWS CLI too.
func TestStackEnvExportsDefaultRegion(t *testing.T) {
	out, err := exec.Command("bash", "../../localstack/stack.sh", "env").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"export AWS_REGION=us-east-1\n", "export AWS_DEFAULT_REGION=us-east-1\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stack.sh env lacks %q:\n%s", want, out)
		}
	}
}
