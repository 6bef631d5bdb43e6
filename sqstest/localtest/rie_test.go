package localtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// echoPkg is the Lambda function of these tests: testdata/echo/main.go.
const echoPkg = "github.com/sqsworker/sqsworker/sqstest/localtest/testdata/echo"

// startEcho builds the echo function and runs it under the RIE.
func startEcho(t *testing.T, env ...string) *RIE {
	t.Helper()
	RequireRIE(t) // before the build, which a skip makes useless
	return StartRIE(t, BuildBootstrap(t, echoPkg), env...)
}

// invoke invokes r and fails the test on an HTTP error.
func invoke(t *testing.T, r *RIE, payload string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	status, body, err := r.Invoke(ctx, []byte(payload))
	if err != nil {
		t.Fatalf("invoking with %s: %v", payload, err)
	}
	return status, string(body)
}

// functionError is the body of a function error, from the RIE.
type functionError struct {
	ErrorMessage string            `json:"errorMessage"`
	ErrorType    string            `json:"errorType"`
	StackTrace   []json.RawMessage `json:"stackTrace"`
}

func parseFunctionError(t *testing.T, body string) functionError {
	t.Helper()
	var e functionError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.ErrorType == "" {
		t.Fatalf("not a function error: %s", body)
	}
	return e
}

func TestRIE(t *testing.T) {
	RequireRIE(t)
	bootstrap := BuildBootstrap(t, echoPkg)
	start := time.Now()
	r := StartRIE(t, bootstrap, "SQSWORKER_RIE_TEST=passed through", "AWS_LAMBDA_FUNCTION_NAME=echo")
	listening := time.Since(start)

	// Two invokes in sequence: the first starts the function.
	for i := 1; i <= 2; i++ {
		payload := fmt.Sprintf(`{"n":%d,"s":"héllo"}`, i)
		status, body := invoke(t, r, payload)
		if i == 1 {
			t.Logf("cold start: %v from starting the RIE to the first invoke's answer (RIE listening after %v)", time.Since(start), listening)
		}
		if status != 200 || body != payload {
			t.Fatalf("invoke %d: %d %s, want 200 %s", i, status, body, payload)
		}
	}

	t.Run("bad payload", func(t *testing.T) {
		status, body := invoke(t, r, `not json`)
		e := parseFunctionError(t, body)
		if status != 200 || e.ErrorType != "SyntaxError" || !strings.Contains(e.ErrorMessage, "invalid character") {
			t.Errorf("got %d %s, want 200 and a SyntaxError", status, body)
		}
	})
	t.Run("function error", func(t *testing.T) {
		status, body := invoke(t, r, `{"error":"boom"}`)
		if status != 200 || body != `{"errorMessage":"boom","errorType":"errorString"}` {
			t.Errorf("got %d %s", status, body)
		}
	})
	t.Run("environment", func(t *testing.T) {
		status, body := invoke(t, r, `{"env":["SQSWORKER_RIE_TEST","AWS_LAMBDA_FUNCTION_TIMEOUT","AWS_LAMBDA_RUNTIME_API","AWS_LAMBDA_FUNCTION_NAME"]}`)
		var env map[string]string
		if err := json.Unmarshal([]byte(body), &env); status != 200 || err != nil {
			t.Fatalf("got %d %s", status, body)
		}
		want := map[string]string{
			"SQSWORKER_RIE_TEST":          "passed through",
			"AWS_LAMBDA_FUNCTION_TIMEOUT": strconv.Itoa(RIEFunctionTimeout),
			"AWS_LAMBDA_RUNTIME_API":      r.RuntimeAPI(),
			"AWS_LAMBDA_FUNCTION_NAME":    "echo",
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s = %q, want %q", k, env[k], v)
			}
		}
	})
	t.Run("context", func(t *testing.T) {
		status, body := invoke(t, r, `{"context":true}`)
		var c struct {
			FunctionName string `json:"functionName"`
			ARN          string `json:"arn"`
			MSLeft       int64  `json:"msLeft"`
		}
		if err := json.Unmarshal([]byte(body), &c); status != 200 || err != nil {
			t.Fatalf("got %d %s", status, body)
		}
		if c.FunctionName != "echo" || !strings.HasSuffix(c.ARN, ":function:echo") {
			t.Errorf("function %q, ARN %q", c.FunctionName, c.ARN)
		}
		if limit := int64(RIEFunctionTimeout * 1000); c.MSLeft > limit || c.MSLeft < limit-5000 {
			t.Errorf("%dms left before the deadline, want about %dms", c.MSLeft, limit)
		}
	})
	t.Run("panic", func(t *testing.T) {
		status, body := invoke(t, r, `{"panic":"oops"}`)
		e := parseFunctionError(t, body)
		if status != 502 || e.ErrorMessage != "oops" || e.ErrorType != "string" || len(e.StackTrace) == 0 {
			t.Errorf("got %d %s, want 502 and the panic", status, body)
		}
		// The function exited; the next invoke starts it again.
		restart := time.Now()
		if status, body := invoke(t, r, `{"after":"panic"}`); status != 200 || body != `{"after":"panic"}` {
			t.Errorf("after the panic: %d %s", status, body)
		}
		t.Logf("restart after a panic: %v", time.Since(restart))
	})

	t.Run("throughput", func(t *testing.T) {
		event, err := json.Marshal(events.SQSEvent{Records: []events.SQSMessage{{
			MessageId: "059f36b4-87a3-44ab-83d2-661975830a7d", ReceiptHandle: "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
			Body: `{"job":"resize","id":42}`, EventSource: "aws:sqs", AWSRegion: "us-east-1",
			EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:jobs",
			Attributes:     map[string]string{"ApproximateReceiveCount": "1"},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		began := time.Now()
		for i := range n {
			status, body := invoke(t, r, string(event))
			if status != 200 || !bytes.Equal([]byte(body), event) {
				t.Fatalf("invoke %d: %d %s", i, status, body)
			}
		}
		d := time.Since(began)
		t.Logf("%d sequential invokes in %v: %.0f invokes/s, %v each (%s/%s)", n, d, n/d.Seconds(), d/n, runtime.GOOS, runtime.GOARCH)
	})
}

// TestRIEParallelInvokes checks that invokes from many goroutines are
// serialised: the RIE would crash on them.
func TestRIEParallelInvokes(t *testing.T) {
	r := startEcho(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			payload := fmt.Sprintf(`{"sleep":20,"i":%d}`, i)
			status, body, err := r.Invoke(context.Background(), []byte(payload))
			if err != nil || status != 200 || string(body) != payload {
				t.Errorf("invoke %d: %d %s %v", i, status, body, err)
			}
		})
	}
	wg.Wait()
}

// TestRIEInvokeContext checks that an Invoke whose context ends returns at
// once, and that the next one waits for the abandoned invoke to end.
func TestRIEInvokeContext(t *testing.T) {
	r := startEcho(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	if _, _, err := r.Invoke(ctx, []byte(`{"sleep":1000}`)); err == nil || ctx.Err() == nil {
		t.Fatalf("invoke past its context: err %v", err)
	}
	if d := time.Since(began); d > 900*time.Millisecond {
		t.Errorf("the cancelled invoke returned after %v", d)
	}
	if status, body := invoke(t, r, `{"next":1}`); status != 200 || body != `{"next":1}` {
		t.Errorf("next invoke: %d %s", status, body)
	}
	if d := time.Since(began); d < time.Second {
		t.Errorf("the next invoke ended after %v, before the abandoned one", d)
	}
}

// TestRIETimeout checks what the RIE answers for a function that runs past
// AWS_LAMBDA_FUNCTION_TIMEOUT, and that the function runs again after.
func TestRIETimeout(t *testing.T) {
	r := startEcho(t, "AWS_LAMBDA_FUNCTION_TIMEOUT=1")
	status, body := invoke(t, r, `{"sleep":5000}`)
	if status != 200 || body != "Task timed out after 1.00 seconds" {
		t.Errorf("got %d %q", status, body)
	}
	if status, body := invoke(t, r, `{"after":"timeout"}`); status != 200 || body != `{"after":"timeout"}` {
		t.Errorf("after the timeout: %d %s", status, body)
	}
}

// fatalRecorder is a testing.TB whose Fatal ends the goroutine, recording
// the message, instead of failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestBuildBootstrapError(t *testing.T) {
	f := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		BuildBootstrap(f, "github.com/sqsworker/sqsworker/sqstest/localtest/testdata/nosuch")
	}()
	<-done
	if !strings.Contains(f.msg, "building the bootstrap") || !strings.Contains(f.msg, "nosuch") {
		t.Errorf("fatal message %q, want the build's output", f.msg)
	}
}
