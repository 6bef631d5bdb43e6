package awserr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

func TestClassification(t *testing.T) {
	api := func(code string) error {
		return fmt.Errorf("operation error SQS: ReceiveMessage: %w", &smithy.GenericAPIError{Code: code, Message: "m"})
	}
	for _, c := range []struct {
		name           string
		err            error
		fatal, missing bool
	}{
		{"missing modeled", fmt.Errorf("op: %w", &types.QueueDoesNotExist{}), true, true},
		{"missing legacy code", api("AWS.SimpleQueueService.NonExistentQueue"), true, true},
		{"access denied", api("AccessDenied"), true, false},
		{"bad token", api("InvalidClientTokenId"), true, false},
		{"throttled", api("RequestThrottled"), false, false},
		{"server fault", api("InternalError"), false, false},
		{"network", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false, false},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), false, false},
		{"not in flight", &types.MessageNotInflight{}, false, false},
		{"invalid handle", api("ReceiptHandleIsInvalid"), false, false},
		{"invalid parameter", api("InvalidParameterValue"), true, false},
		{"invalid parameter, legacy code", api("AWS.SimpleQueueService.InvalidParameterValue"), true, false},
	} {
		if got := IsFatal(c.err); got != c.fatal {
			t.Errorf("%s: IsFatal = %v", c.name, got)
		}
		if got := IsQueueMissing(c.err); got != c.missing {
			t.Errorf("%s: IsQueueMissing = %v", c.name, got)
		}
	}
}

// statusErr is an error response with an HTTP status, as the SDK's
// ResponseError is.
type statusErr int

func (e statusErr) Error() string       { return fmt.Sprintf("status %d", int(e)) }
func (e statusErr) HTTPStatusCode() int { return int(e) }

// Only an error response from SQS (4xx) says that a receive was handed
// nothing and waits no more.
func TestMayHaveReceived(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"throttled", fmt.Errorf("receive: %w", statusErr(400)), false},
		{"denied", statusErr(403), false},
		{"server fault", statusErr(500), true},
		{"unavailable", fmt.Errorf("receive: %w", statusErr(503)), true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, true},
		{"deadline", context.DeadlineExceeded, true},
		{"cancelled", fmt.Errorf("receive: %w", context.Canceled), true},
	} {
		if got := MayHaveReceived(c.err); got != c.want {
			t.Errorf("%s: MayHaveReceived(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// A request SQS answered with an error, or never received (a connection
// never made), was not applied; any other failure may have been.
func TestMayHaveApplied(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"throttled", fmt.Errorf("purge: %w", statusErr(400)), false},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, false},
		{"no such host", &net.DNSError{Err: "no such host", Name: "sqs.example", IsNotFound: true}, false},
		{"server fault", statusErr(500), true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, true},
		{"deadline", context.DeadlineExceeded, true},
	} {
		if got := MayHaveApplied(c.err); got != c.want {
			t.Errorf("%s: MayHaveApplied(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
