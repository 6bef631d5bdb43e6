// Package logattr gives a logger attributes that its handler gets only when
// the logger is first used.
//
// slog.Logger.With hands its attributes to the handler at once, and the
// standard library's handlers format them then: the right trade for a logger
// that logs many records, the wrong one for a logger made for each Lambda
// invocation, most of which log nothing.
package logattr

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// With returns a logger that logs as l.With(attrs...) does, handing the
// attributes to l's handler (its WithAttrs) when the logger is first asked
// whether it logs a level, or first handles a record, rather than now.
// Attributes whose values are slog.LogValuers are resolved then too. The
// logger's handler is this package's; the caller's handler is behind it.
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

// handler is next with attrs added, once they are needed.
type handler struct {
	next  slog.Handler
	attrs []slog.Attr // never handed on itself: children append to it
	once  sync.Once
	with  slog.Handler // next.WithAttrs(a copy of attrs), made once
}

// formatted is next with the attributes: made once, whoever asks first,
// from a copy of them, which next's WithAttrs may keep or change.
func (h *handler) formatted() slog.Handler {
	h.once.Do(func() { h.with = h.next.WithAttrs(slices.Clone(h.attrs)) })
	return h.with
}

// Enabled is the formatted handler's: a handler may enable levels by its
// attributes.
func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.formatted().Enabled(ctx, level)
}

// Handle handles r with the attributes.
func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	return h.formatted().Handle(ctx, r)
}

// WithAttrs stays lazy: the attributes join those not yet handed on.
func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return with(h, attrs)
}

// WithGroup hands the attributes on first: they belong outside the group.
func (h *handler) WithGroup(name string) slog.Handler {
	return h.formatted().WithGroup(name)
}
