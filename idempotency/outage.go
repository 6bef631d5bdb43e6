package idempotency

import (
	"context"
	"errors"
	"fmt"
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

// ErrMisconfigured matches the errors of store requests that DynamoDB
// refused for the store's configuration, not for the job: the table does
// not exist, the credentials may not use it or are not accepted, or its key
// schema does not fit the store. A DynamoStore returns them marked
// sqsworker.Unavailable, so that the runtimes' circuit breaker opens and
// the jobs wait (rather than spend their receives and be dead-lettered)
// until an operator fixes the table; the error says what to fix.
var ErrMisconfigured = errors.New("DynamoDB refused the request for the store's configuration, not for the job")

// credentialCodes are the error codes of requests whose credentials
// DynamoDB does not accept.
var credentialCodes = map[string]bool{
	"UnrecognizedClientException":         true,
	"InvalidSignatureException":           true,
	"MissingAuthenticationTokenException": true,
	"IncompleteSignatureException":        true,
	"ExpiredTokenException":               true,
	"InvalidClientTokenId":                true,
}

// misconfiguration returns what an operator should fix when err, the
// failure of a request about the records of table, is DynamoDB refusing
// it for the store's configuration: the table missing (ResourceNotFound),
// access denied, the credentials refused, or, when validation is true (a
// request on a record alone, whose key and attributes the store made and
// checked), a ValidationException, which then means the table's key schema
// does not fit. It returns "" for any other error.
func misconfiguration(err error, table, keyAttr string, validation bool) string {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return ""
	}
	code := api.ErrorCode()
	switch {
	case code == "ResourceNotFoundException":
		return fmt.Sprintf("table %s does not exist (in the client's region and account): create it (idempotency.CreateTable, or the infrastructure code) or correct StoreConfig.Table; with the handler's writes (AddWrites), their tables must exist too", table)
	case code == "AccessDeniedException":
		return fmt.Sprintf("the credentials may not write to table %s: grant the role dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem and dynamodb:DescribeTable on it (and, with the handler's writes, the actions of those writes on their tables)", table)
	case credentialCodes[code]:
		return fmt.Sprintf("DynamoDB does not accept the credentials of the requests to table %s (%s): check the role or the keys the process runs with, and the client's region", table, code)
	case validation && code == "ValidationException":
		return fmt.Sprintf("table %s does not fit the store: its partition key must be the string attribute %q (StoreConfig.KeyAttr), with no sort key; recreate the table (idempotency.CreateTable) or correct StoreConfig", table, keyAttr)
	}
	return ""
}
