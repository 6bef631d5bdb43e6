package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

func TestUIUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ui"}, "QUEUE arguments or --prefix"},
		{[]string{"ui", "q", "--interval", "100ms"}, "--interval 100ms"},
		{[]string{"ui", "q", "--addr", "8080"}, "--addr"},
		{[]string{"ui", "q", "--scan-max", "10001"}, "--scan-max 10001: want 1 to 10000"},
		{[]string{"ui", "q", "--scan-max", "0"}, "--scan-max 0"},
	} {
		_, stderr, code := runCLI(t, "", tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

var servingURL = regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+/)(\?token=([0-9a-z]+))? `)

// TestUIServesAndShutsDown runs `sqsworker ui --prefix` with an access
// token, reads the queue figures through it, and stops it as Ctrl-C does.
func TestUIServesAndShutsDown(t *testing.T) {
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	localtest.Send(t, c, q.DLQURL, "", "dead 1", "dead 2")
	name := q.URL[strings.LastIndexByte(q.URL, '/')+1:]

	errOut := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		root := newRoot(strings.NewReader(""), io.Discard, errOut)
		root.SetArgs([]string{"ui", "--prefix", name, "--addr", "127.0.0.1:0", "--token", "s3cret", "--interval", "1s"})
		done <- root.ExecuteContext(ctx)
	}()
	var m []string
	localtest.Eventually(t, 30*time.Second, func() bool {
		m = servingURL.FindStringSubmatch(errOut.String())
		return m != nil
	}, "ui did not print its address:\n%s", errOut.String())
	if m[3] != "" || strings.Contains(errOut.String(), "s3cret") || !strings.Contains(errOut.String(), "read-only") {
		t.Errorf("start message: %s", errOut.String())
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	res, err := hc.Get(m[1] + "api/queues")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d", res.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, m[1]+"api/queues", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	res, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Queues []struct {
			Queue string `json:"queue"`
			DLQ   *struct {
				Queue string `json:"queue"`
				Depth int    `json:"depth"`
			} `json:"dlq"`
		} `json:"queues"`
		RequestsPerMinute float64 `json:"requestsPerMinute"`
	}
	err = json.NewDecoder(res.Body).Decode(&snap)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The prefix lists the queue only (its dead-letter queue's name
	// starts with "dlq-").
	if len(snap.Queues) != 1 || snap.Queues[0].Queue != name || snap.Queues[0].DLQ == nil || snap.Queues[0].DLQ.Depth != 2 {
		t.Errorf("queues: %+v", snap)
	}
	// One reading a second: ListQueues, the queue and its dead-letter
	// queue.
	if snap.RequestsPerMinute != 180 {
		t.Errorf("requests per minute: %v, want 180", snap.RequestsPerMinute)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ui ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ui did not shut down")
	}
	if strings.Contains(errOut.String(), "dead 1") {
		t.Errorf("a body in the log:\n%s", errOut.String())
	}
}

// TestUIStartMessage checks that the access token is printed once when
// ui makes it, in the address to open, and never when --token gave it
// (the operator has it; stderr often ends in a log).
func TestUIStartMessage(t *testing.T) {
	const tok = "0123456789abcdef"
	made := uiStartMessage("http://192.0.2.1:8080/", tok, true, "read-only")
	if strings.Count(made, tok) != 1 || !strings.Contains(made, "http://192.0.2.1:8080/?token="+tok+" ") {
		t.Errorf("made token:\n%s", made)
	}
	given := uiStartMessage("http://192.0.2.1:8080/", tok, false, "read-only")
	if strings.Contains(given, tok) || !strings.Contains(given, "serving http://192.0.2.1:8080/ ") || !strings.Contains(given, "--token") {
		t.Errorf("given token:\n%s", given)
	}
	none := uiStartMessage("http://127.0.0.1:8080/", "", false, "read-only")
	if strings.Contains(none, "token") || !strings.Contains(none, "serving http://127.0.0.1:8080/ ") {
		t.Errorf("no token:\n%s", none)
	}
}

// The access token may come from $SQSWORKER_UI_TOKEN instead of --token,
// out of the process list: requests must carry it, and the start message
// does not print it.
func TestUITokenFromEnvironment(t *testing.T) {
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	name := q.URL[strings.LastIndexByte(q.URL, '/')+1:]
	t.Setenv(uiTokenEnv, "from-the-environment")

	errOut := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		root := newRoot(strings.NewReader(""), io.Discard, errOut)
		root.SetArgs([]string{"ui", "--prefix", name, "--addr", "127.0.0.1:0"})
		done <- root.ExecuteContext(ctx)
	}()
	var m []string
	localtest.Eventually(t, 30*time.Second, func() bool {
		m = servingURL.FindStringSubmatch(errOut.String())
		return m != nil
	}, "ui did not print its address:\n%s", errOut.String())
	if strings.Contains(errOut.String(), "from-the-environment") {
		t.Errorf("the start message prints the token: %s", errOut.String())
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	for _, tc := range []struct {
		bearer string
		want   int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {"from-the-environment", http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, m[1]+"api/queues", nil)
		if tc.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("token %q: status %d, want %d", tc.bearer, res.StatusCode, tc.want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ui: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("ui did not stop")
	}
}
