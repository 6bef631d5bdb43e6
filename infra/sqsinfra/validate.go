package sqsinfra

import (
	"fmt"
	"math"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
)

// propErrors collects the invalid props of one construct, to fail with all
// of them at once.
type propErrors struct {
	kind, id string
	msgs     []string
}

func newPropErrors(kind, id string) *propErrors { return &propErrors{kind: kind, id: id} }

func (e *propErrors) add(format string, args ...any) {
	e.msgs = append(e.msgs, fmt.Sprintf(format, args...))
}

// check panics, which fails synthesis, when any prop was invalid.
func (e *propErrors) check() {
	if len(e.msgs) == 0 {
		return
	}
	panic(fmt.Sprintf("sqsinfra.%s %q: invalid props: %s", e.kind, e.id, strings.Join(e.msgs, "; ")))
}

// seconds is d in whole seconds; d must not be a token.
func seconds(d awscdk.Duration) float64 {
	return *d.ToSeconds(nil)
}

// isWhole reports whether f is a whole number.
func isWhole(f float64) bool { return f == math.Trunc(f) && !math.IsInf(f, 0) }

func orDuration(d, def awscdk.Duration) awscdk.Duration {
	if d == nil {
		return def
	}
	return d
}

func orNumber(n *float64, def float64) float64 {
	if n == nil {
		return def
	}
	return *n
}

func pathOf(c constructs.IConstruct) string { return *c.Node().Path() }
