package idempotency_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Defect 4: KeyPrefix is joined to the key with a separator, so that
// prefixes sharing a table cannot collide ("a"+"bc" and "ab"+"c").
func TestKeyPrefixSeparated(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	a := newStore(t, db, idempotency.StoreConfig{KeyPrefix: "a"})
	table := a.Config().Table
	ab, err := idempotency.NewDynamoStore(context.Background(), db, idempotency.StoreConfig{Table: table, KeyPrefix: "ab"})
	if err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Minute)
	if _, existing, err := a.Claim(context.Background(), "bc", "h1", lease, idempotency.Receive{}); err != nil || existing != nil {
		t.Fatalf("a+bc: %v %+v", err, existing)
	}
	if _, existing, err := ab.Claim(context.Background(), "c", "h2", lease, idempotency.Receive{}); err != nil || existing != nil {
		t.Errorf("ab+c found %+v (%v): the prefixes collide", existing, err)
	}
	for _, id := range []string{"a#bc", "ab#c"} {
		if itemOf(t, db, table, id) == nil {
			t.Errorf("no item %q", id)
		}
	}
}

// Defect 4: a KeyPrefix containing the separator is rejected.
func TestKeyPrefixWithSeparatorRejected(t *testing.T) {
	_, err := idempotency.NewDynamoStore(context.Background(), &retriedPutItem{}, idempotency.StoreConfig{Table: "t", KeyPrefix: "orders#v2"})
	if err == nil || !strings.Contains(err.Error(), `KeyPrefix "orders#v2"`) {
		t.Errorf("KeyPrefix with the separator: %v, want an error naming it", err)
	}
}
