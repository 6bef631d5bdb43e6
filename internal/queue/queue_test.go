package queue

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRedrivePolicy(t *testing.T) {
	for _, c := range []struct {
		in      string
		arn     string
		max     int
		wantErr string
	}{
		{`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:d","maxReceiveCount":5}`, "arn:aws:sqs:us-east-1:1:d", 5, ""},
		{`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:d","maxReceiveCount":"3"}`, "arn:aws:sqs:us-east-1:1:d", 3, ""},
		{`not json`, "", 0, "malformed redrive policy"},
		{`{"maxReceiveCount":3}`, "", 0, "no deadLetterTargetArn"},
		{`{"deadLetterTargetArn":"x","maxReceiveCount":0}`, "", 0, "at least 1"},
		{`{"deadLetterTargetArn":"x","maxReceiveCount":"many"}`, "", 0, "whole number"},
		{`{"deadLetterTargetArn":"x"}`, "", 0, "whole number"},
	} {
		arn, max, err := ParseRedrivePolicy(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseRedrivePolicy(%s) error = %v, want %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || arn != c.arn || max != c.max {
			t.Errorf("ParseRedrivePolicy(%s) = %q, %d, %v", c.in, arn, max, err)
		}
	}
}

func TestParseARN(t *testing.T) {
	name, acct, err := ParseARN("arn:aws:sqs:eu-west-1:123456789012:jobs-dlq.fifo")
	if err != nil || name != "jobs-dlq.fifo" || acct != "123456789012" {
		t.Errorf("ParseARN = %q, %q, %v", name, acct, err)
	}
	for _, bad := range []string{"", "arn:aws:sns:eu-west-1:1:t", "arn:aws:sqs:eu-west-1::q", "arn:aws:sqs:eu-west-1:1:", "jobs", "arn:aws:sqs:123456789012:critical:3"} {
		if _, _, err := ParseARN(bad); err == nil {
			t.Errorf("ParseARN(%q) accepted", bad)
		}
	}
}

func TestMoverWithoutQueue(t *testing.T) {
	var mv Mover
	if _, err := mv.Move(t.Context(), nil, errors.New("x")); !errors.Is(err, ErrNoDeadLetterQueue) {
		t.Errorf("Move = %v", err)
	}
}

func TestSiblingURL(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/jobs", "https://sqs.eu-west-1.amazonaws.com/210987654321/jobs-dlq"},
		{"http://127.0.0.1:9324/000000000000/jobs", "http://127.0.0.1:9324/210987654321/jobs-dlq"},
		{"https://sqs.eu-west-1.amazonaws.com/jobs", ""},
		{"sqs.eu-west-1.amazonaws.com/1/jobs", ""},
		{"https://host/1/jobs/extra", ""},
	} {
		got, ok := siblingURL(c.url, "210987654321", "jobs-dlq")
		if got != c.want || ok != (c.want != "") {
			t.Errorf("siblingURL(%q) = %q, %v; want %q", c.url, got, ok, c.want)
		}
	}
}
