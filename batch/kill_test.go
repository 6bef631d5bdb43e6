package batch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/goleak"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// The environment of a worker process started by TestKilledWorker.
const (
	envWorker = "BATCH_TEST_WORKER" // set: run as the worker process
	envQueue  = "BATCH_TEST_QUEUE"
	envTable  = "BATCH_TEST_TABLE"
	envPlain  = "BATCH_TEST_PLAIN" // set: Middleware, without the idempotency middleware
)

func TestMain(m *testing.M) {
	if k := os.Getenv(envKillAt); k != "" {
		if err := runKilledSender(k); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(envWorker) != "" {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// No goroutine is left behind once the tests end (but the idle
	// keep-alive connections of the SDK's shared HTTP transport).
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

// flaky reports whether chunk i fails its first two attempts.
func flaky(i int) bool { return i%7 == 3 }

// runWorker is the worker process of TestKilledWorker: a worker on the
// chunks' queue whose handler applies each chunk's effect (a DynamoDB
// update added to the idempotency record's transaction) and fails its
// first two attempts for the flaky chunks. It runs until SIGTERM, or until
// it is killed.
func runWorker() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	client := sqs.NewFromConfig(cfg)
	table, queue := os.Getenv(envTable), os.Getenv(envQueue)
	coord, err := batch.New(ctx, db, client, batch.Config{Table: table, MaxReceiveCount: 10, Logger: quiet()})
	if err != nil {
		return err
	}
	store, err := idempotency.NewDynamoStore(ctx, db, idempotency.StoreConfig{Table: table})
	if err != nil {
		return err
	}
	guard, err := idempotency.New(store, idempotency.Config{ClaimGrace: 2 * time.Second, Logger: quiet()})
	if err != nil {
		return err
	}
	plain := os.Getenv(envPlain) != ""
	work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		_, i, _ := batch.ParseChunk(m)
		if flaky(i) && m.ReceiveCount <= 2 {
			return fmt.Errorf("chunk %d: flaky dependency (attempt %d)", i, m.ReceiveCount)
		}
		effect := &ddbtypes.Update{
			TableName: &table, Key: keyOf("effect#" + strconv.Itoa(i)),
			UpdateExpression:          aws.String("ADD n :one"),
			ExpressionAttributeValues: vals(":one", "N:1"),
		}
		if plain {
			// At least once: without the idempotency middleware, a
			// chunk killed between its effect and its count runs again.
			_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: effect.TableName, Key: effect.Key,
				UpdateExpression: effect.UpdateExpression, ExpressionAttributeValues: effect.ExpressionAttributeValues})
			return err
		}
		return idempotency.AddWrites(ctx, ddbtypes.TransactWriteItem{Update: effect})
	})
	w, err := worker.New(client, worker.Config{
		QueueURL: queue, Concurrency: 16, WaitTime: time.Second, DisableDepth: true,
		Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second},
		Logger:  quiet(),
	})
	if err != nil {
		return err
	}
	if plain {
		return w.Run(ctx, coord.Middleware(work))
	}
	return w.Run(ctx, coord.WithIdempotency(guard.Middleware)(work))
}

// A batch of 1,000 chunks, some failing twice before succeeding, run by a
// worker process killed (SIGKILL) mid-way and started again: every chunk
// is counted once, its effect applied once, none dead-lettered, and the
// completion job is enqueued exactly once.
//
// The same without the idempotency middleware (Middleware), with 300
// chunks: the counts and the completion are as exact; the effects, at least
// once.
func TestKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("a kill test of 1,000 chunks")
	}
	t.Run("with-idempotency", func(t *testing.T) { t.Parallel(); testKilledWorker(t, 1000, false) })
	t.Run("own-transaction", func(t *testing.T) { t.Parallel(); testKilledWorker(t, 300, true) })
}

// testKilledWorker runs a batch of n chunks.
func testKilledWorker(t *testing.T, n int, plain bool) {
	client := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	table := newTable(t, db)
	chunks := localtest.NewQueue(t, client, localtest.QueueOptions{MaxReceiveCount: 10, VisibilityTimeout: 5 * time.Second})
	callbacks := localtest.NewQueue(t, client, localtest.QueueOptions{})
	ctx := context.Background()
	coord, err := batch.New(ctx, db, client, batch.Config{Table: table, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	spec := batch.Spec{ID: "report-2026-12", QueueURL: chunks.URL, Callback: batch.Callback{QueueURL: callbacks.URL, Body: `{"report":"2026-12"}`}}
	for i := range n {
		spec.Chunks = append(spec.Chunks, producer.Message{Body: fmt.Sprintf(`{"rows":[%d,%d]}`, i*100, i*100+99)})
	}
	start := time.Now()
	if err := coord.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d chunks in %s", n, time.Since(start).Round(time.Millisecond))

	startWorker := func() (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"=1", envQueue+"="+chunks.URL, envTable+"="+table)
		if plain {
			cmd.Env = append(cmd.Env, envPlain+"=1")
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	waitFor := func(what string, timeout time.Duration, cond func(p *batch.Progress) bool) *batch.Progress {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			p := progress(t, coord, spec.ID)
			if cond(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: %+v", what, p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	first, out1 := startWorker()
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = first.Process.Kill()
			_ = first.Wait()
		}
	})
	p := waitFor("a third of the chunks", 3*time.Minute, func(p *batch.Progress) bool { return p.Done >= n/3 })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = first.Wait()
	killed = true
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("first worker: %v, want killed by SIGKILL\n%s", err, out1)
	}
	atKill := progress(t, coord, spec.ID)
	t.Logf("killed the worker at %d chunks done (%d when the kill was decided), %s in", atKill.Done, p.Done, time.Since(start).Round(time.Millisecond))
	if atKill.Done >= n {
		t.Fatalf("the worker finished before it was killed")
	}

	second, out2 := startWorker()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = second.Process.Kill()
			_ = second.Wait()
		}
	})
	waitFor("the completion", 4*time.Minute, func(p *batch.Progress) bool { return !p.Notified.IsZero() })
	t.Logf("completed and notified %s after the start", time.Since(start).Round(time.Millisecond))
	// Stop the second worker: it finishes what it holds.
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("second worker: %v\n%s", err, out2)
	}
	stopped = true

	p = progress(t, coord, spec.ID)
	if p.Total != n || p.Done != n || p.Failed != 0 || p.Pending != 0 || !p.Completed {
		t.Errorf("final progress %+v", p)
	}
	// Exactly one completion job.
	var got []types.Message
	for empty := 0; empty < 2; {
		res, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &callbacks.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			empty++
		}
		got = append(got, res.Messages...)
	}
	if len(got) != 1 {
		t.Fatalf("%d completion jobs on the callback queue, want exactly 1", len(got))
	}
	if k := got[0].MessageAttributes[idempotency.KeyAttribute]; aws.ToString(k.StringValue) != batch.DoneKey(spec.ID) {
		t.Errorf("completion key %q", aws.ToString(k.StringValue))
	}
	if aws.ToString(got[0].MessageId) != p.NotificationMessageID {
		t.Errorf("completion %s, recorded %s", aws.ToString(got[0].MessageId), p.NotificationMessageID)
	}
	// Nothing dead-lettered, nothing left.
	for name, u := range map[string]string{"dead-letter": chunks.DLQURL, "chunks'": chunks.URL} {
		a, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &u, AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
		if err != nil {
			t.Fatal(err)
		}
		if a.Attributes["ApproximateNumberOfMessages"] != "0" || a.Attributes["ApproximateNumberOfMessagesNotVisible"] != "0" {
			t.Errorf("the %s queue holds messages: %v", name, a.Attributes)
		}
	}
	// Every effect applied once.
	counts := map[string]int{}
	for from := 0; from < n; from += 100 {
		keys := make([]map[string]ddbtypes.AttributeValue, 0, 100)
		for i := from; i < from+100; i++ {
			keys = append(keys, keyOf("effect#"+strconv.Itoa(i)))
		}
		req := map[string]ddbtypes.KeysAndAttributes{table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for len(req) > 0 {
			res, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range res.Responses[table] {
				counts[it["id"].(*ddbtypes.AttributeValueMemberS).Value], _ = strconv.Atoi(it["n"].(*ddbtypes.AttributeValueMemberN).Value)
			}
			req = res.UnprocessedKeys
		}
	}
	wrong, again := 0, 0
	for i := range n {
		c := counts["effect#"+strconv.Itoa(i)]
		if plain && c > 1 {
			again++
			continue
		}
		if c != 1 {
			if wrong++; wrong <= 5 {
				t.Errorf("chunk %d: effect applied %d times", i, c)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d chunks' effects not applied exactly once", wrong)
	}
	if plain {
		t.Logf("%d chunks' effects applied twice or more (at least once without the idempotency middleware)", again)
	}
}
