//go:build !linux

package main

import "log/slog"

// startReaper does nothing: containers, where sqsworker may be PID 1, run
// Linux.
func startReaper(*slog.Logger) (stop func()) { return func() {} }
