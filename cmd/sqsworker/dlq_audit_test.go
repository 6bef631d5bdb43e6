package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The audit log names the caller: from sts:GetCallerIdentity (here the
// emulator's, which answers STS when asked), "unknown" with a note and a
// warning when STS cannot be reached, or whoever stands in for it. It is
// created readable by its owner only.
//
// Not parallel: it replaces callerIdentity and sets the STS endpoint.
func TestDlqAuditCaller(t *testing.T) {
	var jobs []job
	for i := range 3 {
		jobs = append(jobs, job{body: "job " + string(rune('a'+i)), fail: classError{"c", "boom"}, permanent: true})
	}
	c, q, _ := newDLQ(t, localtest.QueueOptions{}, jobs...)
	saved := callerIdentity
	t.Cleanup(func() { callerIdentity = saved })
	dir := t.TempDir()
	for i, tc := range []struct {
		name     string
		identity func(context.Context, *app) (string, error)
		sts      string
		caller   string
		note     string
	}{
		{"STS", stsCallerIdentity, localtest.Endpoint(), "arn:aws:iam::000000000000:root", ""},
		{"STS unreachable", stsCallerIdentity, "http://127.0.0.1:1", dlq.UnknownCaller, "sts:GetCallerIdentity failed: "},
		{"stand-in", func(context.Context, *app) (string, error) {
			return "arn:aws:sts::123456789012:assumed-role/ops/alice", nil
		}, "", "arn:aws:sts::123456789012:assumed-role/ops/alice", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			callerIdentity = tc.identity
			if tc.sts != "" {
				t.Setenv("AWS_ENDPOINT_URL_STS", tc.sts)
			}
			audit := filepath.Join(dir, tc.name+".jsonl")
			start := time.Now()
			res, stderr := replayJSON(t, queueName(q.DLQURL), "--yes", "--limit", "1", "--audit", audit)
			if res.Moved != 1 {
				t.Fatalf("moved %d\n%s", res.Moved, stderr)
			}
			if d := time.Since(start); d > identityTimeout+30*time.Second {
				t.Errorf("the replay took %s", d)
			}
			lines := readMoves(t, audit)
			if len(lines) != 1 || lines[0].Caller != tc.caller || (tc.note == "") != (lines[0].CallerNote == "") || !strings.Contains(lines[0].CallerNote, tc.note) {
				t.Errorf("audit %+v", lines)
			}
			if warned := strings.Contains(stderr, `warning: the audit log records the caller as "unknown"`); warned != (tc.note != "") {
				t.Errorf("stderr: %s", stderr)
			}
			fi, err := os.Stat(audit)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("audit log mode %v, %v; want 0600", fi.Mode(), err)
			}
			waitVisible(t, c, q.DLQURL, 3-(i+1))
		})
	}
}
