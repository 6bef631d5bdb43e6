package worker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine is left behind once the tests end:
// every worker started by a test has stopped by then.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the SDK's shared HTTP transport.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}
