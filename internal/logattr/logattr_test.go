package logattr_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sqsworker/sqsworker/internal/logattr"
)

// Every way of logging through a lazy logger writes what slog's With
// writes, for the text and the JSON handlers.
func TestLogsAsWith(t *testing.T) {
	handlers := map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo})
		},
		"json": func(b *bytes.Buffer) slog.Handler {
			return slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo})
		},
	}
	uses := map[string]func(*slog.Logger){
		"record":       func(l *slog.Logger) { l.Info("m", "k", "v") },
		"twice":        func(l *slog.Logger) { l.Info("a"); l.Warn("b", "n", 2) },
		"debug, off":   func(l *slog.Logger) { l.Debug("hidden", "k", "v") },
		"more attrs":   func(l *slog.Logger) { l.With("more", 1).Info("m") },
		"group":        func(l *slog.Logger) { l.WithGroup("g").Info("m", "k", "v") },
		"group attrs":  func(l *slog.Logger) { l.WithGroup("g").With("in", true).Info("m") },
		"quoted value": func(l *slog.Logger) { l.Info("m", "k", "a b=\"c\"") },
	}
	for hn, mk := range handlers {
		for un, use := range uses {
			var got, want bytes.Buffer
			use(logattr.With(logattr.With(slog.New(mk(&got)), slog.String("request", "r 1")), slog.String("queue", "https://q")))
			use(slog.New(mk(&want)).With("request", "r 1").With("queue", "https://q"))
			if stripTime(got.String()) != stripTime(want.String()) {
				t.Errorf("%s, %s:\n got %s\nwant %s", hn, un, got.String(), want.String())
			}
		}
	}
}

// Sibling loggers made from one lazy logger keep their own attributes.
func TestSiblingsKeepTheirOwn(t *testing.T) {
	var b bytes.Buffer
	base := logattr.With(slog.New(slog.NewTextHandler(&b, nil)), slog.String("a", "1"), slog.String("b", "2"))
	x := logattr.With(base, slog.String("x", "1"))
	y := logattr.With(base, slog.String("y", "1"))
	x.Info("m")
	if s := stripTime(b.String()); s != "level=INFO msg=m a=1 b=2 x=1\n" {
		t.Errorf("x logged %q", s)
	}
	b.Reset()
	y.Info("m")
	if s := stripTime(b.String()); s != "level=INFO msg=m a=1 b=2 y=1\n" {
		t.Errorf("y logged %q", s)
	}
}

// Records handled at once from many goroutines each carry the attributes.
func TestConcurrentFirstRecords(t *testing.T) {
	var mu sync.Mutex
	var b bytes.Buffer
	l := logattr.With(slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, b: &b}, nil)), slog.String("q", "u"))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { l.Info("m") })
	}
	wg.Wait()
	if n := bytes.Count(b.Bytes(), []byte("msg=m q=u\n")); n != 8 {
		t.Errorf("%d of 8 records carry the attribute:\n%s", n, b.String())
	}
}

func TestNoAttrsIsTheSameLogger(t *testing.T) {
	l := slog.Default()
	if logattr.With(l) != l {
		t.Error("With without attributes made a new logger")
	}
}

// BenchmarkPerInvocation: a logger made for an invocation that logs
// nothing, as the Lambda adapter makes one, against slog's With.
func BenchmarkPerInvocation(b *testing.B) {
	base := slog.New(slog.NewTextHandler(new(bytes.Buffer), nil))
	b.Run("logattr", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			l := logattr.With(base, slog.String("aws_request_id", "3f0b5c1e-1d2e-4a9b-9c1d-2e3f4a5b6c7d"))
			sink = logattr.With(l, slog.String("queue", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"))
		}
	})
	b.Run("slog", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			l := base.With("aws_request_id", "3f0b5c1e-1d2e-4a9b-9c1d-2e3f4a5b6c7d")
			sink = l.With("queue", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders")
		}
	})
}

var sink *slog.Logger

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// stripTime drops the time attribute of each line, which differs between
// the two loggers.
func stripTime(s string) string {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter([]byte(s), []byte("\n")) {
		if i := bytes.Index(line, []byte("time=")); i == 0 {
			if j := bytes.IndexByte(line, ' '); j > 0 {
				line = line[j+1:]
			}
		}
		if i := bytes.Index(line, []byte(`"time":"`)); i > 0 {
			if j := bytes.Index(line[i:], []byte(`",`)); j > 0 {
				line = append(append([]byte{}, line[:i]...), line[i+j+2:]...)
			}
		}
		out.Write(line)
	}
	return out.String()
}

// keyPrefixer is a handler that takes what WithAttrs's contract allows: it
// changes the slice it is given in place (prefixing each key), and keeps
// it. It counts its WithAttrs calls, and enables Debug once it carries the
// attribute debug=true.
type keyPrefixer struct {
	mu    *sync.Mutex
	out   *bytes.Buffer
	calls *int
	attrs []slog.Attr
}

func (h keyPrefixer) Enabled(_ context.Context, l slog.Level) bool {
	for _, a := range h.attrs {
		if a.Key == "app.debug" && a.Value.Bool() {
			return true
		}
	}
	return l >= slog.LevelInfo
}

func (h keyPrefixer) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.out.WriteString(r.Message)
	for _, a := range h.attrs {
		h.out.WriteString(" " + a.Key + "=" + a.Value.String())
	}
	h.out.WriteString("\n")
	return nil
}

func (h keyPrefixer) WithAttrs(as []slog.Attr) slog.Handler {
	h.mu.Lock()
	*h.calls++
	h.mu.Unlock()
	for i := range as {
		as[i].Key = "app." + as[i].Key
	}
	h.attrs = append(h.attrs[:len(h.attrs):len(h.attrs)], as...)
	return h
}

func (h keyPrefixer) WithGroup(string) slog.Handler { return h }

// A handler that changes the attributes it is handed gets them once, as a
// copy of its own: records logged at once from many goroutines, and a
// child made after its parent logged, carry each key prefixed once, as with
// slog's With. A handler that enables levels by its attributes sees them.
func TestHandlerOwnsWhatItIsHanded(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	calls := 0
	base := slog.New(keyPrefixer{mu: &mu, out: &out, calls: &calls})
	l := logattr.With(base, slog.String("q", "u"))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { l.Info("m") })
	}
	wg.Wait()
	if n := strings.Count(out.String(), "m app.q=u\n"); n != 8 || calls != 1 {
		t.Errorf("%d of 8 records right, %d WithAttrs calls (want 1):\n%s", n, calls, out.String())
	}
	out.Reset()
	logattr.With(l, slog.String("req", "1")).Info("child")
	if got := out.String(); got != "child app.q=u app.req=1\n" {
		t.Errorf("a child made after its parent logged: %q", got)
	}
	out.Reset()
	logattr.With(base, slog.Bool("debug", true)).Debug("shown")
	if got := out.String(); got != "shown app.debug=true\n" {
		t.Errorf("a handler enabling Debug by its attributes: %q", got)
	}
}
