package batch_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
)

// A batch ID reused once its batch expired: DynamoDB's TTL deleted the
// batch's item (or has not yet, its expiry past), but the items of its
// counted chunks, which expire TTL after their count, remain. The new
// batch's chunks would find them and be taken for counted already: the
// batch would never complete. Create refuses the ID, naming the fix, before
// recording anything or sending any chunk; an ID whose batch left no chunk
// items is created again. On the fake SQS and on the local SQS, both with
// DynamoDB Local.
func TestReusedIDAfterExpiry(t *testing.T) {
	t.Parallel()
	for _, emulator := range []bool{false, true} {
		name := "fake"
		if emulator {
			name = "emulator"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var (
				e       *fakeEnv
				receive func(n int) []*sqsworker.Message
			)
			if emulator {
				em := newEmulatorEnv(t, 0)
				e = &em.fakeEnv
				receive = func(n int) []*sqsworker.Message { return receiveAll(t, em.sqs, e.work, n) }
			} else {
				e = newFakeEnv(t, batch.Config{})
				receive = func(n int) []*sqsworker.Message { return receiveAll(t, e.sqs, e.work, n) }
			}
			ctx := context.Background()
			h := e.coord.Middleware(new(effects).handler(nil))
			// The first batch of each ID runs to its completion.
			run := func(id string, n int) {
				t.Helper()
				if err := e.coord.Create(ctx, e.spec(id, n)); err != nil {
					t.Fatal(err)
				}
				for _, m := range receive(n) {
					if err := h.HandleMessage(ctx, m); err != nil {
						t.Fatal(err)
					}
				}
				if p := progress(t, e.coord, id); !p.Completed {
					t.Fatalf("%s: first batch not complete: %+v", id, p)
				}
			}
			key := func(k string) map[string]ddbtypes.AttributeValue {
				return map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: k}}
			}
			expire := func(id string) { // as DynamoDB's TTL does, late
				t.Helper()
				for _, k := range []string{"batch#" + id, "batch#" + id + "#callback"} {
					if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: key(k)}); err != nil {
						t.Fatal(err)
					}
				}
			}

			run("gone", 3)
			expire("gone")
			run("expired", 3)
			past := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
			if _, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: key("batch#expired"),
				UpdateExpression:          aws.String("SET expiry = :past"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":past": &ddbtypes.AttributeValueMemberN{Value: past}},
			}); err != nil {
				t.Fatal(err)
			}

			for _, id := range []string{"gone", "expired"} {
				s := e.spec(id, 4)
				s.Callback.Body = `{"second":true}`
				err := e.coord.Create(ctx, s)
				var reused *batch.ReusedIDError
				if !errors.As(err, &reused) || reused.ID != id || !strings.Contains(err.Error(), "new ID") {
					// What follows without the refusal: the new batch's
					// chunks that the first counted are taken for counted.
					for _, m := range receive(4) {
						_ = h.HandleMessage(ctx, m)
					}
					p, _ := e.coord.Get(ctx, id)
					t.Fatalf("%s: Create of an ID whose expired batch left chunk items: %v, want a *batch.ReusedIDError naming the fix (then: %+v)", id, err, p)
				}
				if id == "gone" {
					var unknown *batch.UnknownBatchError
					if _, err := e.coord.Get(ctx, id); !errors.As(err, &unknown) {
						t.Errorf("%s: the refused batch was recorded: %v", id, err)
					}
				}
				if n := len(receive(10)); n != 0 {
					t.Errorf("%s: %d chunks sent", id, n)
				}
			}

			// An expired batch whose chunk items are gone too: its ID is
			// free again.
			for i := range 3 {
				if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: key("batch#gone#chunk#" + strconv.Itoa(i))}); err != nil {
					t.Fatal(err)
				}
			}
			run("gone", 2)
			// An expired batch whose item DynamoDB has not deleted yet,
			// and whose chunks were never counted (lost, or dead-lettered
			// with their handlers failing): its ID is free again, and
			// Create makes the batch anew. Before, Create found the item,
			// took the batch for recorded and sent, and sent nothing: the
			// job was gone once DynamoDB deleted the item.
			if err := e.coord.Create(ctx, e.spec("unread", 2)); err != nil {
				t.Fatal(err)
			}
			_ = receive(2) // and never handled
			if _, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: key("batch#unread"),
				UpdateExpression:          aws.String("SET expiry = :past"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":past": &ddbtypes.AttributeValueMemberN{Value: past}},
			}); err != nil {
				t.Fatal(err)
			}
			if err := e.coord.Create(ctx, e.spec("unread", 2)); err != nil {
				t.Fatalf("Create of an expired batch without chunk items: %v", err)
			}
			if it := item(t, e.db, e.table, "batch#unread"); it["expiry"] == past {
				t.Errorf("the expired item was kept: %v", it)
			}
			msgs := receive(2)
			if len(msgs) != 2 {
				t.Fatalf("%d chunks sent again, want 2", len(msgs))
			}
			for _, m := range msgs {
				if err := h.HandleMessage(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			if p := progress(t, e.coord, "unread"); !p.Completed {
				t.Errorf("the batch made anew did not complete: %+v", p)
			}
			// Create again of a batch that is there, with its chunks
			// counted, is still no error.
			if err := e.coord.Create(ctx, e.spec("gone", 2)); err != nil {
				t.Errorf("Create again of a live batch: %v", err)
			}
		})
	}
}

// receiveAll receives up to n messages of url, waiting a little for
// them, with their attributes.
func receiveAll(t testing.TB, api interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
}, url string, n int) []*sqsworker.Message {
	t.Helper()
	var out []*sqsworker.Message
	for range 3 {
		out = append(out, receive(t, api, url, n-len(out))...)
		if len(out) >= n {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return out
}
