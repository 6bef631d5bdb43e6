package idempotency

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// outageCodes are the error codes of DynamoDB requests refused because
// DynamoDB is overloaded, throttled or failing on its side: an outage, not a
// fault of the request.
var outageCodes = map[string]bool{
	"ProvisionedThroughputExceededException": true,
	"ThrottlingException":                    true,
	"Throttling":                             true,
	"RequestLimitExceeded":                   true,
	"InternalServerError":                    true,
	"InternalFailure":                        true,
	"ServiceUnavailable":                     true,
	"ServiceUnavailableException":            true,
	"RequestTimeout":                         true,
	"RequestTimeoutException":                true,
}

// outageReasons are the cancellation reasons of a transaction that say
// DynamoDB throttled it.
var outageReasons = map[string]bool{
	"ThrottlingError":               true,
	"ProvisionedThroughputExceeded": true,
	"RequestLimitExceeded":          true,
}

// isOutage reports whether err, a failed store request, means DynamoDB is
// unreachable, slow, throttled or failing on its side (network errors,
// timeouts, HTTP 5xx and 429, throttling codes, the SDK's exhausted retry
// quota), so that the job is not at fault. A request DynamoDB refused for
// what it asked (validation, a failed condition, a missing table, access
// denied), a transaction conflict (contention on an item, not an outage)
// and a cancelled context are not.
func isOutage(err error) bool {
	if err == nil || errors.Is(err, ErrNotHolder) {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false // the caller gave up: shutting down, not an outage
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if outageReasons[aws.ToString(r.Code)] {
				return true
			}
		}
		return false
	}
	var send *smithyhttp.RequestSendError
	var quota ratelimit.QuotaExceededError // a value, as the SDK returns it
	var deser *smithy.DeserializationError
	var netErr net.Error
	if errors.As(err, &send) || errors.As(err, &quota) || errors.As(err, &deser) || errors.As(err, &netErr) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true // no answer, or a broken one
	}
	var api smithy.APIError
	if errors.As(err, &api) && outageCodes[api.ErrorCode()] {
		return true
	}
	var status interface{ HTTPStatusCode() int }
	return errors.As(err, &status) && (status.HTTPStatusCode() >= 500 || status.HTTPStatusCode() == 429)
}

// isConflict reports whether err is DynamoDB refusing a write because a
// transaction is writing the same item.
func isConflict(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "TransactionConflictException"
}
