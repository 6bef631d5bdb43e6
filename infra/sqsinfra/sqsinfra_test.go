package sqsinfra_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/sqsworker/sqsworker/infra/sqsinfra"
)

var codeDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		defer jsii.Close()
		dir, err := os.MkdirTemp("", "sqsinfra")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		codeDir = dir
		return m.Run()
	}())
}

func newStack() awscdk.Stack {
	return awscdk.NewStack(awscdk.NewApp(nil), jsii.String("Test"), nil)
}

// panics runs f and returns the message it panicked with.
func panics(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

func TestInvalidProps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s awscdk.Stack)
		want  []string
	}{
		{"maxReceiveCount zero", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{MaxReceiveCount: jsii.Number(0)})
		}, []string{`JobQueue "Q"`, "MaxReceiveCount must be a whole number >= 1, got 0"}},
		{"FIFO queue with standard DLQ", func(s awscdk.Stack) {
			dlq := awssqs.NewQueue(s, jsii.String("Std"), nil)
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Fifo: true, DeadLetterQueue: dlq})
		}, []string{"DeadLetterQueue must be a FIFO queue for a FIFO queue"}},
		{"standard queue with FIFO DLQ", func(s awscdk.Stack) {
			dlq := awssqs.NewQueue(s, jsii.String("F"), &awssqs.QueueProps{Fifo: jsii.Bool(true)})
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{DeadLetterQueue: dlq})
		}, []string{"DeadLetterQueue must be a standard queue"}},
		{"FIFO name without .fifo", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Fifo: true, QueueName: jsii.String("jobs")})
		}, []string{"QueueName", ".fifo"}},
		{"visibility timeout too short", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(60))})
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: awscdk.Duration_Seconds(jsii.Number(30))})
		}, []string{`LambdaConsumer "C"`, "VisibilityTimeout (60s) must be at least 6 times Timeout (30s)"}},
		{"missing bootstrap", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: jsii.String(t.TempDir()), Timeout: awscdk.Duration_Seconds(jsii.Number(5))})
		}, []string{"CodeDir", "make lambda"}},
		{"missing queue", func(s awscdk.Stack) {
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{CodeDir: &codeDir})
		}, []string{"Queue is required"}},
		{"max concurrency 1", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: awscdk.Duration_Seconds(jsii.Number(5)), MaxConcurrency: jsii.Number(1)})
		}, []string{"MaxConcurrency"}},
		{"stop timeout below shutdown timeout", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, StopTimeout: awscdk.Duration_Seconds(jsii.Number(20))})
		}, []string{`PollerService "P"`, "StopTimeout (20s) must be at least ShutdownTimeout (25s) + 5s, i.e. >= 30s"}},
		{"stop timeout without the margin", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q,
				ShutdownTimeout: awscdk.Duration_Seconds(jsii.Number(60)), StopTimeout: awscdk.Duration_Seconds(jsii.Number(60))})
		}, []string{"StopTimeout (60s) must be at least ShutdownTimeout (60s) + 5s"}},
		{"min tasks above max tasks", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, MinTasks: jsii.Number(5), MaxTasks: jsii.Number(2), DesiredTasks: jsii.Number(5)})
		}, []string{"MaxTasks must be a whole number >= MinTasks (5), got 2", "DesiredTasks"}},
		{"every poller problem at once", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, MinTasks: jsii.Number(0), CPU: jsii.Number(300),
				BacklogPerTask: jsii.Number(0), StopTimeout: awscdk.Duration_Seconds(jsii.Number(200))})
		}, []string{"MinTasks must be a whole number >= 1", "CPU must be one of", "BacklogPerTask must be > 0", "at most 120 seconds"}},
		{"poller without queue", func(s awscdk.Stack) {
			sqsinfra.NewPollerService(s, "P", nil)
		}, []string{"Queue is required"}},
		{"dashboard without queue", func(s awscdk.Stack) {
			sqsinfra.NewDashboard(s, "D", nil)
		}, []string{`Dashboard "D"`, "Queue is required"}},
		{"operator policy without queue", func(s awscdk.Stack) {
			sqsinfra.NewOperatorPolicy(s, "O", nil)
		}, []string{`OperatorPolicy "O"`, "Queue is required"}},
		{"TTL attribute id", func(s awscdk.Stack) {
			sqsinfra.NewIdempotencyTable(s, "T", &sqsinfra.IdempotencyTableProps{TTLAttribute: jsii.String("id")})
		}, []string{`IdempotencyTable "T"`, "TTLAttribute"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := panics(func() { tc.build(newStack()) })
			if msg == "" {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

func TestFifoJobQueueWithKMS(t *testing.T) {
	s := newStack()
	key := awskms.NewKey(s, jsii.String("Key"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
	q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{
		Fifo: true, ContentBasedDeduplication: true, QueueName: jsii.String("jobs.fifo"),
		EncryptionKey: key, MaxReceiveCount: jsii.Number(3),
		VisibilityTimeout: awscdk.Duration_Minutes(jsii.Number(1)),
	})
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: awscdk.Duration_Seconds(jsii.Number(10)), BatchSize: jsii.Number(5)})
	tpl := assertions.Template_FromStack(s, nil)
	check := func(what string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s: %v", what, r)
			}
		}()
		f()
	}
	check("queue", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{
			"QueueName": "jobs.fifo", "FifoQueue": true, "ContentBasedDeduplication": true,
			"KmsMasterKeyId": assertions.Match_AnyValue(),
			"RedrivePolicy":  assertions.Match_ObjectLike(&map[string]any{"maxReceiveCount": 3}),
		})
	})
	check("dlq", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{
			"QueueName": "jobs-dlq.fifo", "FifoQueue": true, "KmsMasterKeyId": assertions.Match_AnyValue(),
			"MessageRetentionPeriod": 14 * 86400,
		})
	})
	check("mapping", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
			"BatchSize": 5, "FunctionResponseTypes": []any{"ReportBatchItemFailures"},
		})
	})
	check("no alarm actions without a topic", func() {
		tpl.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{"AlarmActions": assertions.Match_Absent()})
	})
}

func TestOperatorPolicyPurgeAndKMS(t *testing.T) {
	for _, purge := range []bool{false, true} {
		s := newStack()
		key := awskms.NewKey(s, jsii.String("Key"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
		q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{EncryptionKey: key})
		sqsinfra.NewOperatorPolicy(s, "O", &sqsinfra.OperatorPolicyProps{Queue: q, AllowPurge: purge})
		b, _ := json.Marshal(assertions.Template_FromStack(s, nil).FindResources(jsii.String("AWS::IAM::ManagedPolicy"), nil))
		if got := strings.Contains(string(b), `"sqs:PurgeQueue"`); got != purge {
			t.Errorf("AllowPurge=%t: sqs:PurgeQueue in the policy is %t: %s", purge, got, b)
		}
		if !strings.Contains(string(b), `"kms:Decrypt"`) {
			t.Errorf("the policy of a KMS-encrypted queue lacks kms:Decrypt: %s", b)
		}
	}
}
