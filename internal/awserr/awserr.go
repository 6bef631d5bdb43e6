// Package awserr classifies errors returned by the AWS SDK with errors.As on
// modeled error types and on error codes, never on message text.
package awserr

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// fatalCodes are error codes that retrying cannot fix: the caller's
// configuration or permissions are wrong.
var fatalCodes = map[string]bool{
	"AccessDenied":                                true,
	"AccessDeniedException":                       true,
	"InvalidClientTokenId":                        true,
	"UnrecognizedClientException":                 true,
	"SignatureDoesNotMatch":                       true,
	"InvalidSecurity":                             true,
	"InvalidAddress":                              true,
	"AWS.SimpleQueueService.NonExistentQueue":     true,
	"QueueDoesNotExist":                           true,
	"AWS.SimpleQueueService.QueueDeletedRecently": true,
	"AWS.SimpleQueueService.UnsupportedOperation": true,
	"UnsupportedOperation":                        true,
	"KmsAccessDenied":                             true,
	"KmsDisabled":                                 true,
	"KmsNotFound":                                 true,
	"KmsInvalidKeyUsage":                          true,
	"KmsInvalidState":                             true,
	"KmsOptInRequired":                            true,
	"InvalidParameterValue":                       true,
	// The legacy spelling, which some endpoints (and the local emulator)
	// still return.
	"AWS.SimpleQueueService.InvalidParameterValue": true,
}

// IsFatal reports whether err is one that no retry will fix: a missing queue,
// denied access, bad credentials, an invalid request. Network errors,
// throttling and server faults are not fatal.
func IsFatal(err error) bool {
	if err == nil || IsCanceled(err) {
		return false
	}
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		return fatalCodes[api.ErrorCode()]
	}
	return false
}

// IsInvalidParameter reports whether err is SQS refusing a parameter of the
// request (InvalidParameterValue): for a batch entry, often that entry's
// alone (an expired receipt handle).
func IsInvalidParameter(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		c := api.ErrorCode()
		return c == "InvalidParameterValue" || strings.HasSuffix(c, ".InvalidParameterValue")
	}
	return false
}

// IsAccessDenied reports whether err is a refusal of the caller's
// permissions (AccessDenied).
func IsAccessDenied(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		c := api.ErrorCode()
		return c == "AccessDenied" || c == "AccessDeniedException"
	}
	return false
}

// IsQueueMissing reports whether err says the queue does not exist.
func IsQueueMissing(err error) bool {
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		c := api.ErrorCode()
		return c == "AWS.SimpleQueueService.NonExistentQueue" || c == "QueueDoesNotExist"
	}
	return false
}

// IsCanceled reports whether err comes from a cancelled or expired context.
func IsCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// MayHaveReceived reports whether a receive that failed with err may have
// been handed messages by SQS, or may still be waiting there in a long
// poll: anything but an error response from SQS (4xx), which hands out
// none. A network error, a timeout, a cancelled request or a server fault
// may have reached SQS.
func MayHaveReceived(err error) bool {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		code := re.HTTPStatusCode()
		return code < 400 || code >= 500
	}
	return true
}

// MayHaveApplied reports whether a request that failed with err may have
// been applied by SQS: what MayHaveReceived says, less a connection that
// was never made (refused, or a host not found), which sent nothing.
func MayHaveApplied(err error) bool {
	if !MayHaveReceived(err) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var dns *net.DNSError
	return !errors.As(err, &dns)
}
