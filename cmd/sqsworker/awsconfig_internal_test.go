package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// The timeouts of the defaults mode a user chose (AWS_DEFAULTS_MODE) still
// apply to the clients the commands make, and their request bodies are
// copied: the copying HTTP client goes around the one each client made for
// the mode, not under it.
func TestAWSConfigKeepsDefaultsModeTimeouts(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_DEFAULTS_MODE":           "in-region", // connect timeout 1.1s
		"AWS_REGION":                  "eu-west-1",
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
	} {
		t.Setenv(k, v)
	}
	a := &app{errs: &syncWriter{w: io.Discard}}
	cfg, err := a.loadAWSConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, hc := range map[string]any{
		"sqs":      sqs.NewFromConfig(cfg).Options().HTTPClient,
		"dynamodb": dynamodb.NewFromConfig(cfg).Options().HTTPClient,
	} {
		w, ok := hc.(*sdkhttp.Client)
		if !ok {
			t.Errorf("%s: the HTTP client is a %T, want one that copies request bodies", name, hc)
			continue
		}
		bc, ok := w.Next.(*awshttp.BuildableClient)
		if !ok {
			t.Errorf("%s: the copying client sends through a %T, want the SDK's", name, w.Next)
			continue
		}
		if got := bc.GetDialer().Timeout; got != 1100*time.Millisecond {
			t.Errorf("%s: connect timeout %v, want the in-region mode's 1.1s", name, got)
		}
	}
}
