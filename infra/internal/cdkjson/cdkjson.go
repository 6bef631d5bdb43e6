// Package cdkjson reads infra/cdk.json for the tests: its context holds the
// CDK feature flags that `cdk synth` passes to the app, and the tests'
// apps must synthesize with the same ones.
package cdkjson

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Path is the path of infra/cdk.json, found from this source file so that
// tests of any package read the same one.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "cdk.json")
}

// Context returns the context of cdk.json: the feature flags.
func Context() (map[string]any, error) {
	b, err := os.ReadFile(Path())
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", Path(), err)
	}
	return cfg.Context, nil
}

// MustContext is Context for test set-up; it panics on an error.
func MustContext() *map[string]any {
	ctx, err := Context()
	if err != nil {
		panic(err)
	}
	return &ctx
}
