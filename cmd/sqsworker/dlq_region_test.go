package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// `dlq purge` given the ARN of a dead-letter queue in another region than
// the client's, on the local SQS: refused, naming the region to give,
// nothing purged. GetQueueUrl finds a queue by its name in the client's
// region: the queue of the same name there was purged.
func TestDlqPurgeRefusesAnARNOfAnotherRegion(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.DLQURL, "", "a", "b")
	waitVisible(t, c, q.DLQURL, 2)
	parts := strings.Split(q.DLQARN, ":")
	parts[3] = map[bool]string{true: "eu-west-1", false: "us-east-1"}[parts[3] != "eu-west-1"]
	other := strings.Join(parts, ":")
	// --audit in the test's own directory: should the check fail, the
	// purge's record does not land in the package's.
	_, stderr, code := runCLI(t, "", "dlq", "purge", other, "--yes", "--audit", filepath.Join(t.TempDir(), "audit.jsonl"))
	if code != 1 || !strings.Contains(stderr, "--region "+parts[3]) {
		t.Errorf("purge of %s: exit %d\n%s\nwant 1, naming the region", other, code, stderr)
	}
	waitVisible(t, c, q.DLQURL, 2)
}

// A replay that leaves a matching message because nothing names its source
// queue (no failure metadata, not moved by SQS) exits 1 naming --to, on the
// local SQS; it exited 0 with "moved 0".
func TestDlqReplayNoSourceExits1(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.DLQURL, "", "plain")
	waitVisible(t, c, q.DLQURL, 1)
	_, stderr, code := runCLI(t, "", "dlq", "replay", q.DLQURL, "--yes", "--audit", t.TempDir()+"/audit.jsonl")
	if code != 1 || !strings.Contains(stderr, "nothing names their source queue") || !strings.Contains(stderr, "--to") {
		t.Errorf("exit %d, want 1 naming --to:\n%s", code, stderr)
	}
	waitVisible(t, c, q.DLQURL, 1)
}

// oneLine leaves no control character a message's text could move the
// terminal's cursor with (an ESC sequence in an error text, say).
func TestOneLineEscapesControlCharacters(t *testing.T) {
	got := oneLine("boom\x1b[2K\x1b[1Arepainted\u009b\x07\nnext", 0)
	for _, r := range got {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			t.Fatalf("oneLine left a control character %U: %q", r, got)
		}
	}
	if !strings.Contains(got, "boom") || !strings.Contains(got, "repainted") || !strings.Contains(got, " next") {
		t.Errorf("oneLine = %q", got)
	}
}

// Ctrl-C at the purge's confirmation prompt ends the command at once,
// nothing purged, on the local SQS. The read of the confirmation ignored
// the interrupt: the process went on waiting for a line.
func TestDlqPurgePromptInterrupted(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.DLQURL, "", "a")
	waitVisible(t, c, q.DLQURL, 1)
	cmd := exec.Command(bin, "dlq", "purge", q.DLQURL)
	cmd.Env = cliEnv()
	stdin, err := cmd.StdinPipe() // kept open: nothing typed
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 60*time.Second, func() bool { return strings.Contains(stderr.String(), "to confirm") }, "no prompt: %s", stderr.String())
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the prompt did not end on Ctrl-C\nstderr: %s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(stderr.String(), "not purged") {
		t.Errorf("exit %d\nstderr: %s", code, stderr.String())
	}
	waitVisible(t, c, q.DLQURL, 1)
}

// dlq show --body prints a body's lines and tabs, and every other control
// character as U+FFFD, on the local SQS: a control sequence in a body (SQS
// takes the C1 controls, such as U+009B, CSI, and carriage returns) reached
// the terminal and could repaint what was printed. -o json gives the body
// exactly.
func TestDlqShowBodyEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	if got := printable("a\tb\nc\x1b[2Jd\re\u009b"); got != "a\tb\nc\uFFFD[2Jd\uFFFDe\uFFFD" {
		t.Errorf("printable = %q", got)
	}
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	body := "line 1\n\u009b2J\u009bHline 2\r"
	id := localtest.Send(t, c, q.DLQURL, "", body)[0]
	waitVisible(t, c, q.DLQURL, 1)
	stdout, stderr, code := runCLI(t, "", "dlq", "show", queueName(q.DLQURL), id, "--body")
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	if strings.ContainsAny(stdout, "\u009b\r") || !strings.Contains(stdout, "Body:\nline 1\n\uFFFD2J\uFFFDHline 2\uFFFD\n") {
		t.Errorf("show --body printed %q", stdout)
	}
	stdout, _, code = runCLI(t, "", "-o", "json", "dlq", "show", queueName(q.DLQURL), id, "--body")
	var shown messageJSON
	if err := json.Unmarshal([]byte(stdout), &shown); code != 0 || err != nil || shown.Body == nil || *shown.Body != body {
		t.Errorf("show --body -o json: exit %d, %v, %q", code, err, stdout)
	}
}

// The no-match hint of a replay comes only when the filter left every
// message out: a message that matches but stays (nothing names its source
// queue) is not "no message matched", on the local SQS.
func TestDlqReplayNoMatchHintOnlyWhenNothingMatched(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.DLQURL, "", "orphan", "other")
	waitVisible(t, c, q.DLQURL, 2)
	_, stderr, _ := runCLI(t, "", "dlq", "replay", q.DLQURL, "--visibility", "2s", "--body-contains", "orphan")
	if !strings.Contains(stderr, "nothing names their source queue") || strings.Contains(stderr, "no message matched") {
		t.Errorf("a filter matching a message that stays:\n%s\nwant it said to stay, not that nothing matched", stderr)
	}
	waitVisible(t, c, q.DLQURL, 2)
	_, stderr, _ = runCLI(t, "", "dlq", "replay", q.DLQURL, "--visibility", "2s", "--body-contains", "absent")
	if !strings.Contains(stderr, "no message matched the filter") || !strings.Contains(stderr, "the 2 it left out, by error class: (none) 2") {
		t.Errorf("a filter matching nothing:\n%s\nwant the hint with the 2 messages left out", stderr)
	}
	waitVisible(t, c, q.DLQURL, 2)
}
