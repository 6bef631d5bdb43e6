package idempotency

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/internal/dynamoerr"
)

// isOutage reports whether err, a failed store request, means DynamoDB is
// unreachable, slow, throttled or failing on its side (network errors,
// timeouts, HTTP 5xx and 429, throttling codes, the SDK's exhausted retry
// quota), so that the job is not at fault. A request DynamoDB refused for
// what it asked (validation, a failed condition, a missing table, access
// denied), a transaction conflict (contention on an item, not an outage)
// and a cancelled context are not.
func isOutage(err error) bool {
	return !errors.Is(err, ErrNotHolder) && dynamoerr.Outage(err)
}

// isConflict reports whether err is DynamoDB refusing a write because a
// transaction is writing the same item.
func isConflict(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "TransactionConflictException"
}

// ErrMisconfigured matches the errors of store requests that DynamoDB
// refused for the store's configuration, not for the job: the table does
// not exist, the credentials may not use it, are not accepted or could not
// be got, or its key schema does not fit the store. A DynamoStore returns them marked
// sqsworker.Unavailable, so that the runtimes' circuit breaker opens and
// the jobs wait (rather than spend their receives and be dead-lettered)
// until an operator fixes the table; the error says what to fix.
var ErrMisconfigured = errors.New("DynamoDB refused the request for the store's configuration, not for the job")

// misconfiguration returns what an operator should fix when err, the
// failure of a request about the records of table, is DynamoDB refusing
// it for the store's configuration: the table missing (ResourceNotFound),
// access denied, the credentials refused, or, when validation is true (a
// request on a record alone, whose key and attributes the store made and
// checked), a ValidationException, which then means the table's key schema
// does not fit. It returns "" for any other error.
func misconfiguration(err error, table, keyAttr string, validation bool) string {
	switch why, code := dynamoerr.Refused(err); {
	case why == dynamoerr.TableMissing:
		return fmt.Sprintf("table %s does not exist (in the client's region and account): create it (idempotency.CreateTable, or the infrastructure code) or correct StoreConfig.Table; with the handler's writes (AddWrites), their tables must exist too", table)
	case why == dynamoerr.AccessDenied:
		return fmt.Sprintf("the credentials may not write to table %s: grant the role dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem, dynamodb:GetItem and dynamodb:DescribeTable on it (the infrastructure's IdempotencyTable.GrantStore grants them) (and, with the handler's writes, the actions of those writes on their tables)", table)
	case why == dynamoerr.BadCredentials:
		return fmt.Sprintf("DynamoDB does not accept the credentials of the requests to table %s (%s): check the role or the keys the process runs with, and the client's region", table, code)
	case why == dynamoerr.NoCredentials:
		return fmt.Sprintf("the process could not get credentials for the requests to table %s (%s): check its role (the task's or function's, a role to assume and its trust policy) and the SDK's credential settings", table, code)
	case validation && code == "ValidationException":
		return fmt.Sprintf("table %s does not fit the store: its partition key must be the string attribute %q (StoreConfig.KeyAttr), with no sort key; recreate the table (idempotency.CreateTable) or correct StoreConfig", table, keyAttr)
	}
	return ""
}

// WritesTableError is the error (wrapped, marked sqsworker.PartlyUnavailable
// and matching ErrMisconfigured) of a commit that DynamoDB refused because a
// table of the handler's writes (AddWrites) is missing, may not be
// written to, or is keyed otherwise than the items written to it (checked
// with DescribeTable after DynamoDB refused the commit as invalid; see the
// package documentation), while the idempotency table answered the claim:
// the configuration of that table (a tenant's, say), not the job nor the
// store.
// The job waits, never dead-lettered for it, as for an outage; but DynamoDB
// answers, and the jobs writing to other tables succeed: the runtimes'
// circuit breaker does not count it, so that one tenant's table does not
// pause every tenant's jobs.
type WritesTableError struct {
	// Tables are the tables of the handler's writes the refusal concerns:
	// the one DynamoDB's message names, else every table of the writes.
	Tables []string
	// Err is the commit's error.
	Err error
}

func (e *WritesTableError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *WritesTableError) Unwrap() error { return e.Err }

// writesMisconfiguration returns what an operator should fix, and the
// tables it concerns, when err, the failure of a commit of the record of
// table with writes on the tables writes, is DynamoDB refusing a table of
// the writes: missing (ResourceNotFound) or denied (AccessDenied). The
// idempotency table answered the claim; the refused table is the one
// DynamoDB's message names, if it names one, else one of the writes'. It
// returns "" when err is no such refusal, when there are no writes, or when
// the message names the idempotency table.
func writesMisconfiguration(err error, table string, writes []string) (fix string, tables []string) {
	var api smithy.APIError
	if len(writes) == 0 || !errors.As(err, &api) {
		return "", nil
	}
	code := api.ErrorCode()
	if code != "ResourceNotFoundException" && code != "AccessDeniedException" {
		return "", nil
	}
	msg := api.ErrorMessage()
	for _, t := range writes {
		if mentions(msg, t) {
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		if mentions(msg, table) {
			return "", nil
		}
		tables = writes
	}
	which := "table " + tables[0] + " of the handler's writes (AddWrites)"
	if len(tables) > 1 {
		which = "one of the tables of the handler's writes (AddWrites), " + strings.Join(tables, ", ") + ","
	}
	if code == "ResourceNotFoundException" {
		return fmt.Sprintf("%s does not exist (in the client's region and account): create it, or correct the table name the handler gives (the idempotency table %s answered the claim)", which, table), tables
	}
	return fmt.Sprintf("the credentials may not write to %s: grant the role the actions of those writes (dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem, dynamodb:ConditionCheckItem, and dynamodb:DescribeTable to check its key after a refused commit) on it (the idempotency table %s answered the claim)", which, table), tables
}

// mentions reports whether msg names table: as a word of its own (a
// table's name or ARN, ended by a character no table name has).
func mentions(msg, table string) bool {
	if table == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(msg[i:], table)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(table)
		if (start == 0 || !tableNameByte(msg[start-1])) && (end == len(msg) || !tableNameByte(msg[end])) {
			return true
		}
		i = start + 1
	}
}

// tableNameByte reports whether b may be part of a table's name.
func tableNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-' || b == '.'
}
