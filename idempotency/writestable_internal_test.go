package idempotency

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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

// A write's key is checked against its table's key: by name and type, for
// the Key of an Update, Delete or ConditionCheck, and for the attributes of
// a Put's item, which may carry others.
func TestKeyMismatch(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	idS := []keyElem{{"id", "S"}}
	composite := []keyElem{{"tenant", "S"}, {"at", "N"}}
	for _, c := range []struct {
		w    types.TransactWriteItem
		key  []keyElem
		want string
	}{
		{types.TransactWriteItem{Update: &types.Update{Key: map[string]types.AttributeValue{"id": s("x")}}}, idS, ""},
		{types.TransactWriteItem{Update: &types.Update{Key: map[string]types.AttributeValue{"id": s("x")}}}, []keyElem{{"pk", "S"}}, "the key id (S)"},
		{types.TransactWriteItem{Delete: &types.Delete{Key: map[string]types.AttributeValue{"id": s("x")}}}, []keyElem{{"id", "N"}}, "the key id (S)"},
		{types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{Key: map[string]types.AttributeValue{"tenant": s("x")}}}, composite, "the key tenant (S)"},
		{types.TransactWriteItem{Update: &types.Update{Key: map[string]types.AttributeValue{"tenant": s("x"), "at": n("1")}}}, composite, ""},
		{types.TransactWriteItem{Update: &types.Update{Key: map[string]types.AttributeValue{"id": s("x"), "v": n("1")}}}, idS, "the key id (S), v (N)"},
		{types.TransactWriteItem{Put: &types.Put{Item: map[string]types.AttributeValue{"id": s("x"), "v": n("1")}}}, idS, ""},
		{types.TransactWriteItem{Put: &types.Put{Item: map[string]types.AttributeValue{"id": s("x")}}}, []keyElem{{"pk", "S"}}, "an item without the attribute pk"},
		{types.TransactWriteItem{Put: &types.Put{Item: map[string]types.AttributeValue{"id": s("x")}}}, []keyElem{{"id", "N"}}, "an item whose id is of type S"},
	} {
		if got := keyMismatch(&c.w, c.key); got != c.want {
			t.Errorf("%+v on a table keyed %s: %q, want %q", c.w, formatKey(c.key), got, c.want)
		}
	}
}

// The idempotency table's description is checked on the key keyOf reads:
// keyed by KeyAttr alone, of type S, or a definition missing.
func TestCheckKey(t *testing.T) {
	desc := func(ks []types.KeySchemaElement, defs ...types.AttributeDefinition) *types.TableDescription {
		return &types.TableDescription{KeySchema: ks, AttributeDefinitions: defs}
	}
	hash := types.KeySchemaElement{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}
	sortKey := types.KeySchemaElement{AttributeName: aws.String("at"), KeyType: types.KeyTypeRange}
	def := func(name string, typ types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: typ}
	}
	for _, c := range []struct {
		t    *types.TableDescription
		want string
	}{
		{desc([]types.KeySchemaElement{hash}, def("id", types.ScalarAttributeTypeS)), ""},
		{desc([]types.KeySchemaElement{hash}), ""},
		{desc([]types.KeySchemaElement{sortKey, hash}), "has a sort key at"},
		{desc([]types.KeySchemaElement{hash}, def("id", types.ScalarAttributeTypeN)), "partition key id is of type N, want S"},
		{desc([]types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}}), `partition key is "pk", want "id"`},
		{desc(nil), `partition key is "", want "id"`},
		{nil, "no table description"},
	} {
		err := checkKey(c.t, "id")
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.t, err, c.want)
		}
	}
}
