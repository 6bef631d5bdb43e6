package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// interruptSignal is the cause of a command's context cancelled by SIGINT or
// SIGTERM.
type interruptSignal struct{ sig os.Signal }

func (s interruptSignal) Error() string {
	if s.sig == os.Interrupt {
		return "interrupted by Ctrl-C (SIGINT)"
	}
	if s.sig == syscall.SIGTERM {
		return "interrupted by SIGTERM"
	}
	return "interrupted by " + s.sig.String()
}

// stopNowKey is the context key of the channel closed by a second signal.
type stopNowKey struct{}

// withStopNow returns ctx carrying now, the channel a second interrupt
// closes: commands that wind down gracefully on the first interrupt stop at
// once when it closes.
func withStopNow(ctx context.Context, now <-chan struct{}) context.Context {
	return context.WithValue(ctx, stopNowKey{}, now)
}

// stopNow returns the channel the second interrupt closes, or nil (which
// never becomes ready) when ctx has none.
func stopNow(ctx context.Context) <-chan struct{} {
	now, _ := ctx.Value(stopNowKey{}).(<-chan struct{})
	return now
}

// notifyInterrupts returns a context cancelled by the first SIGINT or
// SIGTERM (its cause an interruptSignal) and carrying a stopNow channel
// closed by the second. After the second, the signals get their default
// handling back: a third ends the process. stop releases the signals and
// waits for the goroutine that watches them.
func notifyInterrupts(parent context.Context) (ctx context.Context, stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(parent)
	now := make(chan struct{})
	ctx = withStopNow(ctx, now)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		first := true
		for {
			select {
			case s := <-ch:
				if first {
					first = false
					cancel(interruptSignal{s})
					continue
				}
				signal.Stop(ch)
				close(now)
				return
			case <-done:
				return
			}
		}
	})
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			wg.Wait()
			cancel(nil)
		})
	}
}

// exitInterrupted is the exit status of a command cut short by Ctrl-C:
// 128 + SIGINT, as shells report it.
const exitInterrupted = 130

// exitCode is the exit status of a command that returned err with ctx, the
// context main gave it: 0 without an error; the error's own code (2 for a
// mistake in the command line); 128 + the signal's number when an
// interrupt cut the command short (130 for Ctrl-C, 143 for SIGTERM); else 1.
func exitCode(ctx context.Context, err error) int {
	if err == nil {
		return 0
	}
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	var ie *interruptedError
	if ctx.Err() == nil && !errors.As(err, &ie) {
		return 1
	}
	var s interruptSignal
	if errors.As(context.Cause(ctx), &s) {
		if n, ok := s.sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
	}
	return exitInterrupted
}

// interruptedError is a command stopped by an interrupt before its work was
// done; its text says what was done and how to go on.
type interruptedError struct{ msg string }

func (e *interruptedError) Error() string { return e.msg }

// untilStopNow returns a context that the first interrupt does not cancel,
// but the second does (or cancel): for the work a command lets finish when
// interrupted once.
func untilStopNow(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	now := stopNow(ctx)
	if now == nil {
		return sctx, cancel
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-now:
			cancel()
		case <-done:
		}
	})
	var once sync.Once
	return sctx, func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			cancel()
		})
	}
}
