package idempotency

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
)

// A commit refused for a table of the handler's writes names that table,
// as DynamoDB's message names it (an ARN, a name among others), or every
// table of the writes when the message names none; a refusal naming the
// idempotency table is left to the store's own message.
func TestWritesMisconfigurationNamesTheTable(t *testing.T) {
	writes := []string{"tenant-a", "tenant-a-archive", "shared"}
	for _, tc := range []struct {
		code, msg string
		tables    []string // nil: not a writes table's refusal
		want      string
	}{
		{"AccessDeniedException", "User: arn:aws:sts::1:assumed-role/w/x is not authorized to perform: dynamodb:UpdateItem on resource: arn:aws:dynamodb:eu-west-1:1:table/tenant-a-archive because no identity-based policy allows it",
			[]string{"tenant-a-archive"}, "may not write to table tenant-a-archive of the handler's writes"},
		{"ResourceNotFoundException", "Requested resource not found: Table: tenant-a not found", []string{"tenant-a"}, "table tenant-a of the handler's writes (AddWrites) does not exist"},
		{"ResourceNotFoundException", "Cannot do operations on a non-existent table", writes, "one of the tables of the handler's writes (AddWrites), tenant-a, tenant-a-archive, shared, does not exist"},
		{"ResourceNotFoundException", "Requested resource not found: Table: orders-idem not found", nil, ""},
		{"ValidationException", "One or more parameter values were invalid", nil, ""},
	} {
		fix, tables := writesMisconfiguration(&smithy.GenericAPIError{Code: tc.code, Message: tc.msg}, "orders-idem", writes)
		if !slices.Equal(tables, tc.tables) || (tc.want == "") != (fix == "") || !strings.Contains(fix, tc.want) {
			t.Errorf("%s %q: %q %q; want tables %q and %q", tc.code, tc.msg, fix, tables, tc.tables, tc.want)
		}
	}
	if fix, _ := writesMisconfiguration(errors.New("connection reset"), "orders-idem", writes); fix != "" {
		t.Errorf("a network error: %q", fix)
	}
}
