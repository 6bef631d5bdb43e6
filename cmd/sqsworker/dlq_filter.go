package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/dlq"
)

// filterFlags are the flags that make a dlq.Filter.
type filterFlags struct {
	classes      []string
	attrs        []string
	since, until string
	bodyContains string
	jsonFields   []string
}

func (ff *filterFlags) add(cmd *cobra.Command, verb string) {
	f := cmd.Flags()
	f.StringArrayVar(&ff.classes, "error-class", nil, verb+" messages whose failure has this error class (repeatable: any of them)")
	f.StringArrayVar(&ff.attrs, "attr", nil, verb+" messages whose attribute NAME has VALUE, as NAME=VALUE (repeatable: all of them)")
	f.StringVar(&ff.since, "since", "", verb+` messages that failed at or after this time: RFC 3339 or a duration ago ("2h ago")`)
	f.StringVar(&ff.until, "until", "", verb+` messages that failed before this time: RFC 3339 or a duration ago ("30m ago")`)
	f.StringVar(&ff.bodyContains, "body-contains", "", verb+" messages whose body contains this text")
	f.StringArrayVar(&ff.jsonFields, "json-field", nil, verb+" messages whose JSON body has this value at a dot path, as PATH=VALUE (repeatable: all of them)")
}

// parse checks the flags and builds the filter, with relative times taken
// from now. Every mistake is named, in one usage error.
func (ff filterFlags) parse(now time.Time) (dlq.Filter, error) {
	var f dlq.Filter
	var errs []error
	for _, c := range ff.classes {
		if strings.TrimSpace(c) == "" {
			errs = append(errs, errors.New("--error-class: empty class"))
			continue
		}
		f.ErrorClasses = append(f.ErrorClasses, c)
	}
	for _, a := range ff.attrs {
		name, value, ok := strings.Cut(a, "=")
		switch {
		case !ok || name == "":
			errs = append(errs, fmt.Errorf("--attr %q: want name=value", a))
		case value == "":
			errs = append(errs, fmt.Errorf("--attr %q: SQS attributes are never empty, so an empty value matches nothing", a))
		default:
			f.Attributes = append(f.Attributes, dlq.Attribute{Name: name, Value: value})
		}
	}
	for _, j := range ff.jsonFields {
		path, value, ok := strings.Cut(j, "=")
		if !ok || !dlq.ValidJSONPath(path) {
			errs = append(errs, fmt.Errorf("--json-field %q: want path=value, the path in dots like order.customer.id or items.0.sku", j))
			continue
		}
		f.JSONFields = append(f.JSONFields, dlq.JSONField{Path: path, Value: value})
	}
	var err error
	if ff.since != "" {
		if f.Since, err = dlq.ParseTime(ff.since, now); err != nil {
			errs = append(errs, fmt.Errorf("--since: %w", err))
		}
	}
	if ff.until != "" {
		if f.Until, err = dlq.ParseTime(ff.until, now); err != nil {
			errs = append(errs, fmt.Errorf("--until: %w", err))
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		errs = append(errs, fmt.Errorf("--since %s is not before --until %s", fmtTime(f.Since), fmtTime(f.Until)))
	}
	f.BodyContains = ff.bodyContains
	if len(errs) > 0 {
		return dlq.Filter{}, usageError{errors.Join(errs...)}
	}
	return f, nil
}

const filterHelp = `
Filters (all optional; a message must pass every one given):
  --error-class C       the failure's error class is C (repeat for any of several)
  --attr NAME=VALUE     the message attribute NAME has the value VALUE (repeatable)
  --since T, --until T  failed at or after T / before T: RFC 3339
                        (2026-11-29T14:00:00Z) or a duration ago (2h ago, 30m, 7d)
                        (--error-class, --since and --until never select a
                        message SQS's redrive moved: its failure metadata, if
                        any, is of an earlier failure)
  --body-contains S     the body contains S
  --json-field P=V      the body is JSON whose field at the dot path P (order.id,
                        items.0.sku) is V (repeatable)`
