package batch

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
)

// dynamoErr wraps the error of a DynamoDB request, marking with
// sqsworker.Unavailable the errors that mean DynamoDB is unreachable,
// throttled or failing, so that the runtimes' circuit breaker counts them
// and never dead-letters a chunk for them. A missing table names the fix.
func (c *Coordinator) dynamoErr(op string, err error) error {
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return sqsworker.Permanent(fmt.Errorf("batch: %s: table %s does not exist: set Config.Table to the idempotency table: %w", op, c.cfg.Table, err))
	}
	err = fmt.Errorf("batch: %s: %w", op, err)
	if retryableErr(err) {
		return sqsworker.Unavailable(err)
	}
	return err
}

// retryableErr reports whether err may pass: a network error, a timeout,
// throttling, a conflict, or an HTTP 5xx.
func retryableErr(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"TransactionConflictException", "TransactionInProgressException", "InternalServerError", "ServiceUnavailable":
			return true
		}
	}
	var ops *smithy.OperationError
	if errors.As(err, &ops) && !errors.As(err, &api) {
		// A failure before any answer (a reset connection, say).
		return true
	}
	return false
}

// conflict reports whether err is DynamoDB refusing a transaction for
// conflicting with another on the same item: a TransactionConflict
// cancellation reason, or a TransactionConflictException.
func conflict(err error) bool {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "TransactionConflict" {
				return true
			}
		}
	}
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "TransactionConflictException"
}
