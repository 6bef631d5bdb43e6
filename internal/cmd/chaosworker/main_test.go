package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker"
)

func TestParseJob(t *testing.T) {
	good := []struct {
		body string
		want Job
	}{
		{`{"id":"a"}`, Job{ID: "a"}},
		{`{"id":"a","sleep_ms":50,"pad":"xyz"}`, Job{ID: "a", SleepMS: 50, Pad: "xyz"}},
		{` {"id":"ünï","poison":"fail","other":1} `, Job{ID: "ünï", Poison: "fail"}},
		{`{"id":"a","group":"g01","seq":3}`, Job{ID: "a", Group: "g01", Seq: 3}},
	}
	for _, c := range good {
		got, err := ParseJob(c.body)
		if err != nil || got != c.want {
			t.Errorf("ParseJob(%q) = %+v, %v; want %+v", c.body, got, err, c.want)
		}
	}
	bad := []string{
		"",
		" \t\r\n ",
		"a\xffb",
		`{"id":`,
		`["a"]`,
		`{"id":"a"} {"id":"b"}`,
		`{"sleep_ms":1}`,
		"{\"id\":\"a\ufffdb\"}",
		`{"id":"a\ud800b"}`,
		`{"id":"a","sleep_ms":-1}`,
		`{"id":"a","sleep_ms":"1"}`,
		`{"id":"a","poison":"what"}`,
		`{"id":"a","group":"g01"}`,
		`{"id":"a","seq":1}`,
		`{"id":"a","group":"g01","seq":-1}`,
		`{"id":"a","group":"` + strings.Repeat("g", maxGroupBytes+1) + `","seq":1}`,
		`{"id":"` + strings.Repeat("k", maxKeyBytes+1) + `"}`,
	}
	for _, body := range bad {
		_, err := ParseJob(body)
		var p *sqsworker.PermanentError
		if err == nil || !errors.As(err, &p) {
			t.Errorf("ParseJob(%.40q): %v; want a Permanent error", body, err)
		}
	}
}

func TestSettingsRefuseRemoteEndpoints(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_SQS", "https://sqs.eu-west-1.amazonaws.com")
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000")
	var out strings.Builder
	_, err := parseSettings([]string{"-queue-url", "q", "-effects-table", "e", "-idempotency-table", "i"}, &out)
	if err == nil || !strings.Contains(err.Error(), "AWS_ENDPOINT_URL_SQS") {
		t.Fatalf("parseSettings with a remote SQS endpoint: %v; want a refusal naming it", err)
	}
	t.Setenv("AWS_ENDPOINT_URL_SQS", "http://localhost:9324")
	if _, err := parseSettings([]string{"-queue-url", "q", "-effects-table", "e", "-idempotency-table", "i"}, &out); err != nil {
		t.Fatalf("parseSettings with local endpoints: %v", err)
	}
}
