// Package dynamoerr classifies the errors of DynamoDB requests, once for
// the packages that keep their state in DynamoDB (idempotency, batch): an
// outage, which the job waits out behind the runtimes' circuit breaker,
// and a refusal for the table's configuration or the caller's access,
// which an operator fixes and which no job is at fault for.
package dynamoerr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
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
	// STS failing to reach the identity provider of a web identity (EKS,
	// ECS roles): the credentials of the request could not be got, for
	// now (see NoCredentials).
	"IDPCommunicationError": true,
}

// outageReasons are the cancellation reasons of a transaction that say
// DynamoDB throttled it.
var outageReasons = map[string]bool{
	"ThrottlingError":               true,
	"ProvisionedThroughputExceeded": true,
	"RequestLimitExceeded":          true,
}

// Outage reports whether err, a failed DynamoDB request, means DynamoDB is
// unreachable, slow, throttled or failing on its side (network errors,
// timeouts, HTTP 5xx and 429, throttling codes, the SDK's exhausted retry
// quota), so that the job is not at fault. A request DynamoDB refused for
// what it asked (validation, a failed condition, a missing table, access
// denied), a transaction conflict (contention on an item, not an outage)
// and a cancelled context are not.
func Outage(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
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

// Refusal is why DynamoDB refused a request for its table or its caller
// rather than for what it asked: see Refused.
type Refusal int

// The refusals Refused tells apart.
const (
	// NotRefused: err is none of the others.
	NotRefused Refusal = iota
	// TableMissing: the table does not exist in the client's region and
	// account (ResourceNotFoundException).
	TableMissing
	// AccessDenied: the credentials may not make the request
	// (AccessDeniedException).
	AccessDenied
	// BadCredentials: DynamoDB does not accept the credentials (unknown,
	// expired, or a bad signature).
	BadCredentials
	// NoCredentials: the SDK could not get credentials for the request,
	// which DynamoDB never saw: the role to assume refused them (STS
	// AccessDenied, InvalidIdentityToken), the instance or task has no
	// role, the SSO session expired. Not when getting them failed for an
	// outage (Outage).
	NoCredentials
)

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

// Refused returns why DynamoDB refused the request that failed with err
// for its table or its caller, and the error code; NotRefused for any
// other error. No retry passes such a refusal, and no job is at fault for
// it: every request to the table fails the same way until an operator
// fixes the table, the role or the region.
func Refused(err error) (Refusal, string) {
	var api smithy.APIError
	hasCode := errors.As(err, &api)
	if noCredentials(err) && !Outage(err) && !errors.Is(err, context.Canceled) {
		if hasCode {
			return NoCredentials, api.ErrorCode()
		}
		return NoCredentials, "credentials"
	}
	if !hasCode {
		return NotRefused, ""
	}
	switch code := api.ErrorCode(); {
	case code == "ResourceNotFoundException":
		return TableMissing, code
	case code == "AccessDeniedException":
		return AccessDenied, code
	case credentialCodes[code]:
		return BadCredentials, code
	default:
		return NotRefused, code
	}
}

// credentialServices are the services the SDK calls to get credentials.
var credentialServices = map[string]bool{"STS": true, "SSO": true, "SSO OIDC": true, "ec2imds": true, "Signin": true}

// noCredentials reports whether err failed in getting the request's
// credentials, before it was sent: the SDK's identity resolution ("get
// identity: ..."), or a call of another service on its way (STS, SSO, the
// instance metadata service) inside the DynamoDB operation's error.
func noCredentials(err error) bool {
	if err == nil {
		return false
	}
	for e := err; e != nil; {
		var op *smithy.OperationError
		if !errors.As(e, &op) {
			break
		}
		if credentialServices[op.ServiceID] {
			return true
		}
		e = op.Err
	}
	return strings.Contains(err.Error(), "get identity: ")
}
