package batch

import (
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/dynamoerr"
)

// dynamoErr wraps the error of a DynamoDB request, marking with
// sqsworker.Unavailable the errors that mean DynamoDB is unreachable,
// throttled or failing, so that the runtimes' circuit breaker counts them
// and never dead-letters a chunk for them. So are the refusals for the
// table or the caller (the table missing, access denied, credentials
// refused), which say what to fix: no chunk is at fault for them, and a
// chunk that ran its handler, dead-lettered for them, would run it again
// when replayed.
func (c *Coordinator) dynamoErr(op string, err error) error {
	if fix := c.refusalFix(err); fix != "" {
		return sqsworker.Unavailable(fmt.Errorf("batch: %s: %s: %w", op, fix, err))
	}
	err = fmt.Errorf("batch: %s: %w", op, err)
	if retryableErr(err) {
		return sqsworker.Unavailable(err)
	}
	return err
}

// refusalFix returns what an operator should fix when err is DynamoDB
// refusing a request for the table or the caller (dynamoerr.Refused), and
// "" for any other error.
func (c *Coordinator) refusalFix(err error) string {
	switch why, code := dynamoerr.Refused(err); why {
	case dynamoerr.TableMissing:
		return fmt.Sprintf("table %s does not exist (in the client's region and account): set Config.Table to the idempotency table, or create it", c.cfg.Table)
	case dynamoerr.AccessDenied:
		return fmt.Sprintf("the credentials may not use table %s: grant the role dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem, dynamodb:GetItem and dynamodb:DescribeTable on it (the infrastructure's IdempotencyTable.GrantStore grants them), and dynamodb:BatchGetItem to read a batch's progress", c.cfg.Table)
	case dynamoerr.BadCredentials:
		return fmt.Sprintf("DynamoDB does not accept the credentials of the requests to table %s (%s): check the role or the keys the process runs with, and the client's region", c.cfg.Table, code)
	case dynamoerr.NoCredentials:
		return fmt.Sprintf("the process could not get credentials for the requests to table %s (%s): check its role (the task's or function's, a role to assume and its trust policy) and the SDK's credential settings", c.cfg.Table, code)
	}
	return ""
}

// retryableErr reports whether err may pass: an outage (see
// dynamoerr.Outage), a transaction that conflicted with another, or a
// request that failed before DynamoDB answered.
func retryableErr(err error) bool {
	if dynamoerr.Outage(err) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "TransactionConflictException", "TransactionInProgressException":
			return true
		}
	}
	// A failure with no answer from DynamoDB that Outage does not name
	// (credentials that could not be fetched, say).
	var ops *smithy.OperationError
	return errors.As(err, &ops) && !errors.As(err, &api)
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
