package sqsworker

import (
	"encoding/json"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Names of the message attributes that carry failure metadata on messages the
// runtimes move to a dead-letter queue.
const (
	AttrFailureError         = "sqsworker.error"
	AttrFailureClass         = "sqsworker.error-class"
	AttrFailureAttempts      = "sqsworker.attempts"
	AttrFailureFirstReceived = "sqsworker.first-received"
	AttrFailureFailedAt      = "sqsworker.failed-at"
	AttrFailureSourceQueue   = "sqsworker.source-queue"
	AttrFailureMessageID     = "sqsworker.message-id"
	AttrFailureHost          = "sqsworker.host"
	// AttrFailure carries all of the failure metadata as one JSON object
	// when the message has too many attributes of its own to add them one
	// by one.
	AttrFailure = "sqsworker.failure"
)

// MaxMessageAttributes is the number of message attributes SQS allows on one
// message.
const MaxMessageAttributes = 10

// MaxFailureErrorLen is the longest error text, in bytes, kept in failure
// metadata; longer texts are cut at a rune boundary.
const MaxFailureErrorLen = 2048

// Failure is the metadata a runtime adds to a message it moves to a
// dead-letter queue.
type Failure struct {
	Error         string    `json:"error"`
	ErrorClass    string    `json:"errorClass"`
	Attempts      int       `json:"attempts"`
	FirstReceived time.Time `json:"firstReceived,omitzero"`
	FailedAt      time.Time `json:"failedAt,omitzero"`
	SourceQueue   string    `json:"sourceQueue"`
	MessageID     string    `json:"messageId"`
	Host          string    `json:"host,omitempty"`
}

var failureAttrNames = [...]string{
	AttrFailureError, AttrFailureClass, AttrFailureAttempts, AttrFailureFirstReceived,
	AttrFailureFailedAt, AttrFailureSourceQueue, AttrFailureMessageID, AttrFailureHost,
}

// IsFailureAttribute reports whether name is one of the attributes that carry
// failure metadata.
func IsFailureAttribute(name string) bool {
	if name == AttrFailure {
		return true
	}
	for _, n := range failureAttrNames {
		if n == name {
			return true
		}
	}
	return false
}

// AddTo returns a copy of attrs, less any earlier failure metadata, with f
// added: as one attribute per field when they fit within SQS's limit of ten
// attributes, else as the single JSON attribute [AttrFailure]. ok is false when
// even that does not fit; attrs is then returned without failure metadata, so
// that the message itself is never lost.
//
// AddTo ignores the size of the message; [Failure.AddWithin] keeps within it.
func (f Failure) AddTo(attrs map[string]MessageAttribute) (out map[string]MessageAttribute, ok bool) {
	return f.add(attrs, math.MaxInt)
}

// AddWithin is [Failure.AddTo] for a message with the given body that must
// stay within maxSize bytes, counted as [MessageSize] counts them (maxSize <=
// 0 stands for [MaxMessageSize]). It returns a copy of attrs, less any
// earlier failure metadata, with f added in the first of these forms that
// keeps the message within both SQS's ten attributes and maxSize:
//
//  1. one attribute per field ([AttrFailureError], [AttrFailureClass], ...);
//  2. the single JSON attribute [AttrFailure];
//  3. none: ok is false, and attrs is returned without failure metadata, so
//     that the message itself is never lost.
//
// The third form may still be over maxSize when body and attrs are: the
// message was then already too large for a queue with that limit.
func (f Failure) AddWithin(body string, attrs map[string]MessageAttribute, maxSize int) (out map[string]MessageAttribute, ok bool) {
	if maxSize <= 0 {
		maxSize = MaxMessageSize
	}
	return f.add(attrs, maxSize-len(body))
}

// add returns attrs less earlier failure metadata plus f, in the first form
// that fits within SQS's ten attributes and room bytes of attributes.
func (f Failure) add(attrs map[string]MessageAttribute, room int) (out map[string]MessageAttribute, ok bool) {
	out = make(map[string]MessageAttribute, len(attrs)+len(failureAttrNames))
	for k, v := range attrs {
		if !IsFailureAttribute(k) {
			out[k] = v
		}
	}
	room -= attributesSize(out)
	f.Error = truncateUTF8(attributeSafe(f.Error), MaxFailureErrorLen)
	f.ErrorClass = attributeSafe(f.ErrorClass)
	f.SourceQueue = attributeSafe(f.SourceQueue)
	f.MessageID = attributeSafe(f.MessageID)
	f.Host = attributeSafe(f.Host)
	if len(out)+len(failureAttrNames) <= MaxMessageAttributes {
		if fields := f.fields(); attributesSize(fields) <= room {
			maps.Copy(out, fields)
			return out, true
		}
	}
	if len(out)+1 <= MaxMessageAttributes {
		b, _ := json.Marshal(f)
		one := map[string]MessageAttribute{AttrFailure: {DataType: "String.json", StringValue: string(b)}}
		if attributesSize(one) <= room {
			maps.Copy(out, one)
			return out, true
		}
	}
	return out, false
}

// fields returns f as one attribute per field.
func (f Failure) fields() map[string]MessageAttribute {
	str := func(v string) MessageAttribute { return MessageAttribute{DataType: "String", StringValue: v} }
	return map[string]MessageAttribute{
		AttrFailureError:         str(nonEmpty(f.Error)),
		AttrFailureClass:         str(nonEmpty(f.ErrorClass)),
		AttrFailureAttempts:      {DataType: "Number", StringValue: strconv.Itoa(f.Attempts)},
		AttrFailureFirstReceived: str(formatTime(f.FirstReceived)),
		AttrFailureFailedAt:      str(formatTime(f.FailedAt)),
		AttrFailureSourceQueue:   str(nonEmpty(f.SourceQueue)),
		AttrFailureMessageID:     str(nonEmpty(f.MessageID)),
		AttrFailureHost:          str(nonEmpty(f.Host)),
	}
}

// ParseFailure reads the failure metadata from a dead-lettered message's
// attributes, in either of the forms [Failure.AddTo] writes. ok is false when
// the attributes carry none.
func ParseFailure(attrs map[string]MessageAttribute) (f Failure, ok bool) {
	if a, found := attrs[AttrFailure]; found {
		return f, json.Unmarshal([]byte(a.StringValue), &f) == nil
	}
	if _, found := attrs[AttrFailureClass]; !found {
		return f, false
	}
	get := func(name string) string {
		v := attrs[name].StringValue
		if v == "-" {
			return ""
		}
		return v
	}
	f.Error = get(AttrFailureError)
	f.ErrorClass = get(AttrFailureClass)
	f.Attempts, _ = strconv.Atoi(get(AttrFailureAttempts))
	f.FirstReceived, _ = time.Parse(time.RFC3339Nano, get(AttrFailureFirstReceived))
	f.FailedAt, _ = time.Parse(time.RFC3339Nano, get(AttrFailureFailedAt))
	f.SourceQueue = get(AttrFailureSourceQueue)
	f.MessageID = get(AttrFailureMessageID)
	f.Host = get(AttrFailureHost)
	return f, true
}

// SQS rejects empty string attribute values; "-" stands for none.
func nonEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// attributeSafe replaces the characters SQS does not allow in attribute values
// (most control characters, invalid UTF-8) with U+FFFD.
func attributeSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD && r != utf8.RuneError,
			r >= 0x10000 && r <= 0x10FFFF:
			return r
		}
		return utf8.RuneError
	}, s)
}
