package sqsinfra

import (
	"fmt"
	"math"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
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

// seconds is d, or def when d is nil, in seconds. A duration that is a
// token (a CloudFormation parameter, an attribute, a lazy value) cannot be
// checked when the app is synthesized: it is an error naming the prop, and
// seconds returns NaN, which no later check of the prop takes as a value
// (see known).
func (e *propErrors) seconds(name string, d, def awscdk.Duration) float64 {
	if d == nil {
		d = def
	}
	if *d.IsUnresolved() {
		e.add("%s is a token (a CloudFormation parameter, an attribute or a lazy value): give a literal duration such as awscdk.Duration_Seconds(jsii.Number(30)), which the construct can check when the app is synthesized", name)
		return math.NaN()
	}
	return *d.ToMilliseconds(&awscdk.TimeConversionOptions{Integral: jsii.Bool(false)}) / 1000
}

// number is *p, or def when p is nil. A number that is a token is an error
// naming the prop, and number returns NaN (see seconds).
func (e *propErrors) number(name string, p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	if *awscdk.Token_IsUnresolved(*p) {
		e.add("%s is a token (a CloudFormation parameter, an attribute or a lazy value): give a literal number, which the construct can check when the app is synthesized", name)
		return math.NaN()
	}
	return *p
}

// durationSeconds is d in seconds; d must be a literal duration.
func durationSeconds(d awscdk.Duration) float64 {
	return *d.ToMilliseconds(&awscdk.TimeConversionOptions{Integral: jsii.Bool(false)}) / 1000
}

// known reports whether f is a value rather than the NaN of a token.
func known(f float64) bool { return !math.IsNaN(f) }

// isWhole reports whether f is a whole number.
func isWhole(f float64) bool { return f == math.Trunc(f) && !math.IsInf(f, 0) }

// secondsDuration is s seconds as a Duration; whole seconds stay seconds,
// others are given in milliseconds.
func secondsDuration(s float64) awscdk.Duration {
	if isWhole(s) {
		return awscdk.Duration_Seconds(jsii.Number(s))
	}
	return awscdk.Duration_Millis(jsii.Number(math.Round(s * 1000)))
}

// goDuration is s seconds in Go's time.Duration syntax (what the sqsworker
// CLI's flags take): "25s", "1m30s", "1.5s".
func goDuration(s float64) string {
	if !isWhole(s) {
		return fmt.Sprintf("%gs", s)
	}
	n := int64(s)
	h, m, sec := n/3600, n%3600/60, n%60
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if sec > 0 || b.Len() == 0 {
		fmt.Fprintf(&b, "%ds", sec)
	}
	return b.String()
}

func pathOf(c constructs.IConstruct) string { return *c.Node().Path() }
