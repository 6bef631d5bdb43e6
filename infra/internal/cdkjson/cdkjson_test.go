package cdkjson

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// recommended reads the feature flags the CDK library in go.mod recommends
// for new projects (what `cdk init` writes): recommended-feature-flags.json
// in the aws-cdk-lib tarball that the Go module embeds.
func recommended(t *testing.T) map[string]any {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/aws/aws-cdk-go/awscdk/v2")
	cmd.Dir = filepath.Dir(Path())
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("cannot locate the CDK module (go list: %v); the feature flags are checked against it when it can be", err)
	}
	tarballs, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "jsii", "aws-cdk-lib-*.tgz"))
	if len(tarballs) != 1 {
		t.Fatalf("no single aws-cdk-lib tarball in the CDK module: %v", tarballs)
	}
	f, err := os.Open(tarballs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no package/recommended-feature-flags.json: %v", tarballs[0], err)
		}
		if h.Name != "package/recommended-feature-flags.json" {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		var flags map[string]any
		if err := json.Unmarshal(b, &flags); err != nil {
			t.Fatal(err)
		}
		return flags
	}
}

// TestRecommendedFlags checks that cdk.json sets every feature flag the CDK
// recommends, to its recommended value: after a CDK upgrade this test names
// the new ones (the CLI would only warn "N feature flags are not
// configured").
func TestRecommendedFlags(t *testing.T) {
	ctx, err := Context()
	if err != nil {
		t.Fatal(err)
	}
	rec := recommended(t)
	var missing []string
	for k, want := range rec {
		got, ok := ctx[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("cdk.json sets %s to %v; the CDK recommends %v", k, got, want)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		t.Errorf("cdk.json lacks the recommended feature flag %s = %v", k, rec[k])
	}
	if len(rec) < 50 {
		t.Errorf("only %d recommended flags read: the tarball's layout changed?", len(rec))
	}
}
