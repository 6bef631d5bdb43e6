// Package logattr gives a logger attributes that are formatted only when it
// logs a record.
//
// slog.Logger.With formats its attributes at once, in the handlers of the
// standard library: the right trade for a logger that logs many records,
// the wrong one for a logger made for each Lambda invocation, most of which
// log nothing.
package logattr

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// With returns a logger that logs as l.With(attrs...) does, formatting the
// attributes when it first handles a record rather than now.
func With(l *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	if len(attrs) == 0 {
		return l
	}
	return slog.New(with(l.Handler(), attrs))
}

func with(h slog.Handler, attrs []slog.Attr) *handler {
	if lh, ok := h.(*handler); ok {
		// Three-index slice: a sibling's append must not write into it.
		return &handler{next: lh.next, attrs: append(lh.attrs[:len(lh.attrs):len(lh.attrs)], attrs...)}
	}
	return &handler{next: h, attrs: attrs}
}

// handler is next with attrs added, once a record is handled.
type handler struct {
	next  slog.Handler
	attrs []slog.Attr
	with  atomic.Pointer[slog.Handler] // next.WithAttrs(attrs), once made
}

func (h *handler) formatted() slog.Handler {
	if f := h.with.Load(); f != nil {
		return *f
	}
	f := h.next.WithAttrs(h.attrs)
	h.with.Store(&f)
	return f
}

// Enabled is next's: attributes do not change what is enabled.
func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle formats the attributes, the first time, and handles r with them.
func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	return h.formatted().Handle(ctx, r)
}

// WithAttrs stays lazy: the attributes join those not yet formatted.
func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return with(h, attrs)
}

// WithGroup formats the attributes first: they belong outside the group.
func (h *handler) WithGroup(name string) slog.Handler {
	return h.formatted().WithGroup(name)
}
