package sqsinfra_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/sqsworker/sqsworker/infra/internal/cdkjson"
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
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		codeDir = dir
		return m.Run()
	}())
}

// newStack is a stack of an app with cdk.json's feature flags.
func newStack() awscdk.Stack {
	return awscdk.NewStack(awscdk.NewApp(&awscdk.AppProps{Context: cdkjson.MustContext()}), jsii.String("Test"), nil)
}

func secs(n float64) awscdk.Duration { return awscdk.Duration_Seconds(jsii.Number(n)) }

// handler is a HandlerContainer for tests.
func handler() *sqsinfra.HandlerContainer {
	return &sqsinfra.HandlerContainer{
		Image:       awsecs.ContainerImage_FromRegistry(jsii.String("public.ecr.aws/example/handler:1"), nil),
		HealthCheck: &awsecs.HealthCheck{Command: jsii.Strings("CMD", "/handler", "-healthcheck")},
	}
}

// image is a worker image that needs no build context.
func image() awsecs.ContainerImage {
	return awsecs.ContainerImage_FromRegistry(jsii.String("public.ecr.aws/example/sqsworker:1"), nil)
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
	param := func(s awscdk.Stack) *float64 {
		return awscdk.NewCfnParameter(s, jsii.String("P"), &awscdk.CfnParameterProps{Type: jsii.String("Number")}).ValueAsNumber()
	}
	poller := func(s awscdk.Stack, p *sqsinfra.PollerServiceProps) {
		if p.Queue == nil {
			p.Queue = sqsinfra.NewJobQueue(s, "Q", nil)
		}
		if p.Image == nil && p.ImageDir == nil {
			p.Image = image()
		}
		sqsinfra.NewPollerService(s, "P", p)
	}
	for _, tc := range []struct {
		name  string
		build func(s awscdk.Stack)
		want  []string
	}{
		{"maxReceiveCount zero", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{MaxReceiveCount: jsii.Number(0)})
		}, []string{`JobQueue "Q"`, "MaxReceiveCount must be a whole number from 1 to 1000, got 0"}},
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
		{"name too long for the DLQ", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{QueueName: jsii.String(strings.Repeat("j", 78))})
		}, []string{"too long", "80 characters"}},
		{"duration token", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: awscdk.Duration_Seconds(param(s))})
		}, []string{"VisibilityTimeout is a token", "literal duration such as awscdk.Duration_Seconds"}},
		{"number token", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{MaxReceiveCount: param(s)})
		}, []string{"MaxReceiveCount is a token", "literal number"}},
		{"fractional visibility", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: awscdk.Duration_Millis(jsii.Number(1500))})
		}, []string{"VisibilityTimeout must be whole seconds from 0 to 12 hours, got 1.5s"}},
		{"budget under a minute", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{LatencyBudget: secs(30)})
		}, []string{"LatencyBudget must be whole seconds, at least 1 minute"}},
		{"topic and create topic", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Alarms: sqsinfra.QueueAlarmProps{
				Topic: awssns.NewTopic(s, jsii.String("T"), nil), CreateTopic: true}})
		}, []string{"Alarms: give Topic or CreateTopic, not both"}},
		{"breaker minutes", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Alarms: sqsinfra.QueueAlarmProps{BreakerOpenFor: secs(90)}})
		}, []string{"Alarms.BreakerOpenFor must be whole minutes from 1 to 60"}},
		{"AWS namespace", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{MetricsNamespace: jsii.String("AWS/SQS")})
		}, []string{"MetricsNamespace must be a non-empty namespace outside AWS/"}},
		{"import without attributes", func(s awscdk.Stack) {
			sqsinfra.ImportJobQueue(s, "Q", &sqsinfra.ExistingJobQueueProps{})
		}, []string{`ImportJobQueue "Q"`, "Queue is required", "DeadLetterQueue is required", "VisibilityTimeout is required", "MaxReceiveCount is required"}},
		{"explicit visibility timeout too short", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: secs(60)})
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: secs(30)})
		}, []string{`LambdaConsumer "C"`, "VisibilityTimeout (60s) must be at least 6 times Timeout (30s) plus MaxBatchingWindow (0s), i.e. >= 180s", "leave it out"}},
		{"batching window in the rule", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: secs(180)})
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: secs(30), MaxBatchingWindow: secs(5)})
		}, []string{"plus MaxBatchingWindow (5s), i.e. >= 185s"}},
		{"imported queue too short", func(s awscdk.Stack) {
			q := sqsinfra.ImportJobQueue(s, "Q", &sqsinfra.ExistingJobQueueProps{
				Queue:             awssqs.Queue_FromQueueArn(s, jsii.String("E"), jsii.String("arn:aws:sqs:eu-west-1:123456789012:jobs")),
				DeadLetterQueue:   awssqs.Queue_FromQueueArn(s, jsii.String("D"), jsii.String("arn:aws:sqs:eu-west-1:123456789012:jobs-dlq")),
				VisibilityTimeout: secs(30), MaxReceiveCount: jsii.Number(5),
			})
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir})
		}, []string{"raise the existing queue's visibility timeout"}},
		{"maxReceiveCount under 5 with Lambda", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{MaxReceiveCount: jsii.Number(3)})
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir})
		}, []string{"MaxReceiveCount (3) must be at least 5 with a Lambda consumer"}},
		{"missing bootstrap", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: jsii.String(t.TempDir()), Timeout: secs(5)})
		}, []string{"CodeDir", "make lambda"}},
		{"missing queue", func(s awscdk.Stack) {
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{CodeDir: &codeDir})
		}, []string{"Queue is required"}},
		{"max concurrency 1", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, MaxConcurrency: jsii.Number(1)})
		}, []string{"MaxConcurrency must be a whole number from 2 to 1000"}},
		{"reserved below max concurrency", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, MaxConcurrency: jsii.Number(10), ReservedConcurrency: jsii.Number(5)})
		}, []string{"ReservedConcurrency (5) must be at least MaxConcurrency (10)"}},
		{"a retention as long as the dead-letter queue's", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{RetentionPeriod: awscdk.Duration_Days(jsii.Number(14))})
		}, []string{"RetentionPeriod must be at most 13 days for a standard queue (got 14 days)", "enqueue time"}},
		{"a poller of a queue without visibility timeout", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: secs(0)})
			poller(s, &sqsinfra.PollerServiceProps{Queue: q, HandlerURL: jsii.String("http://h:8080/")})
		}, []string{"has a VisibilityTimeout of 0", "JobQueueProps.VisibilityTimeout"}},
		{"reserved concurrency without MaxConcurrency", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, ReservedConcurrency: jsii.Number(5)})
		}, []string{"ReservedConcurrency (5) needs MaxConcurrency (from 2 to it)", "dead-letter queue unrun"}},
		{"reserved concurrency 0", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, ReservedConcurrency: jsii.Number(0)})
		}, []string{"ReservedConcurrency 0 throttles every invocation", "disable its event source mapping"}},
		{"filter on attributes", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir,
				Filters: []map[string]any{{"messageAttributes": map[string]any{"kind": []any{"x"}}}}})
		}, []string{`Filters[0] has the key "messageAttributes"`, "delete every message"}},
		{"FIFO with a batching window", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Fifo: true})
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, MaxBatchingWindow: secs(1)})
		}, []string{"MaxBatchingWindow is not supported for a FIFO queue"}},
		{"subnets without a VPC", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, VpcSubnets: &awsec2.SubnetSelection{}})
		}, []string{"VpcSubnets and SecurityGroups need Vpc"}},
		{"no handler", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{})
		}, []string{`PollerService "P"`, "give Handler", "every message would go round to the dead-letter queue"}},
		{"handler without health check", func(s awscdk.Stack) {
			h := handler()
			h.HealthCheck = nil
			poller(s, &sqsinfra.PollerServiceProps{Handler: h})
		}, []string{"Handler.HealthCheck with a Command is required"}},
		{"handler and handler URL", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), HandlerURL: jsii.String("http://x/jobs")})
		}, []string{"HandlerURL is for the default command without a Handler"}},
		{"bad handler URL", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{HandlerURL: jsii.String("localhost:8080")})
		}, []string{`HandlerURL must be an http:// or https:// URL, got "localhost:8080"`}},
		{"stop timeout below shutdown timeout", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), StopTimeout: secs(20)})
		}, []string{"StopTimeout (20s) must be at least ShutdownTimeout (25s) + 5s, i.e. >= 30s"}},
		{"stop timeout without the margin", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), ShutdownTimeout: secs(60), StopTimeout: secs(60)})
		}, []string{"StopTimeout (60s) must be at least ShutdownTimeout (60s) + 5s"}},
		{"min tasks above max tasks", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), MinTasks: jsii.Number(5), MaxTasks: jsii.Number(2), DesiredTasks: jsii.Number(5)})
		}, []string{"MaxTasks must be a whole number >= MinTasks (5) and >= 1, got 2", "DesiredTasks"}},
		{"job duration and backlog", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), JobDuration: secs(2), BacklogPerTask: jsii.Number(100)})
		}, []string{"give JobDuration (the target is derived from it) or BacklogPerTask (the target itself), not both"}},
		{"cluster and network", func(s awscdk.Stack) {
			n := sqsinfra.NewNetwork(s, "N", nil)
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), Cluster: n.Cluster, Network: n})
		}, []string{"give Cluster or Network, not both"}},
		{"cluster without Container Insights", func(s awscdk.Stack) {
			c := awsecs.NewCluster(s, jsii.String("C"), &awsecs.ClusterProps{ContainerInsightsV2: awsecs.ContainerInsights_DISABLED})
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), Cluster: c})
		}, []string{"must have Container Insights on"}},
		{"every poller problem at once", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), MinTasks: jsii.Number(-1), CPU: jsii.Number(300),
				BacklogPerTask: jsii.Number(0), StopTimeout: secs(200), CPUAlarmPercent: jsii.Number(0), TaskShortfallAlarmAfter: secs(30)})
		}, []string{"MinTasks must be a whole number >= 0", "CPU must be one of", "BacklogPerTask must be > 0", "at most 120",
			"CPUAlarmPercent must be more than 0 and at most 100, got 0 (DisableCPUAlarm turns the alarm off)", "TaskShortfallAlarmAfter must be whole minutes"}},
		{"an environment variable the construct sets", func(s awscdk.Stack) {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir,
				Environment: map[string]string{"SQSWORKER_BATCHING_WINDOW": "0s", "AWS_REGION": "eu-west-1", "MY_SETTING": "ok"}})
		}, []string{"Environment sets SQSWORKER_BATCHING_WINDOW, which the construct sets", "Environment sets AWS_REGION, which Lambda reserves"}},
		{"alarm periods past a day", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Alarms: sqsinfra.QueueAlarmProps{EvaluationPeriods: jsii.Number(1441)}})
		}, []string{"Alarms.EvaluationPeriods must be a whole number from 1 to 1440"}},
		{"a queue name SQS refuses", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{QueueName: jsii.String("orders:eu")})
		}, []string{`QueueName "orders:eu" must be 1 to 80 letters, digits, '-' and '_'`}},
		{"a latency budget past the retention", func(s awscdk.Stack) {
			sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{LatencyBudget: awscdk.Duration_Hours(jsii.Number(2)), RetentionPeriod: awscdk.Duration_Hours(jsii.Number(1))})
		}, []string{"LatencyBudget (7200s) must be shorter than RetentionPeriod (3600s)"}},
		{"a task size Fargate does not run", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), CPU: jsii.Number(256), MemoryMiB: jsii.Number(1000)})
		}, []string{"MemoryMiB must be 512, 1024 or 2048 for CPU 256 (Fargate's sizes), got 1000"}},
		{"a memory between Fargate's steps", func(s awscdk.Stack) {
			poller(s, &sqsinfra.PollerServiceProps{Handler: handler(), CPU: jsii.Number(1024), MemoryMiB: jsii.Number(2500)})
		}, []string{"MemoryMiB must be from 2048 to 8192 in steps of 1024 for CPU 1024 (Fargate's sizes), got 2500"}},
		{"poller without queue", func(s awscdk.Stack) {
			sqsinfra.NewPollerService(s, "P", nil)
		}, []string{"Queue is required"}},
		{"network with a VPC and endpoints", func(s awscdk.Stack) {
			sqsinfra.NewNetwork(s, "N", &sqsinfra.NetworkProps{Vpc: awsec2.NewVpc(s, jsii.String("V"), nil), VpcEndpoints: true})
		}, []string{`Network "N"`, "give Vpc or them, not both"}},
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

// check runs an assertion, which panics with its diff on a mismatch.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

// resourcesOf returns the resources of typ in tpl, by logical id.
func resourcesOf(tpl assertions.Template, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range *tpl.FindResources(jsii.String(typ), nil) {
		b, _ := json.Marshal(r)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		out[id] = m
	}
	return out
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

func TestFifoJobQueueWithKMS(t *testing.T) {
	s := newStack()
	key := awskms.NewKey(s, jsii.String("Key"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
	q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{
		Fifo: true, ContentBasedDeduplication: true, QueueName: jsii.String("jobs.fifo"),
		EncryptionKey: key, MaxReceiveCount: jsii.Number(5),
	})
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: secs(10), BatchSize: jsii.Number(5)})
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "queue", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{
			"QueueName": "jobs.fifo", "FifoQueue": true, "ContentBasedDeduplication": true,
			"KmsMasterKeyId":    assertions.Match_AnyValue(),
			"VisibilityTimeout": 60, // raised by the consumer: 6 × 10 s
			"RedrivePolicy":     assertions.Match_ObjectLike(&map[string]any{"maxReceiveCount": 5}),
		})
	})
	check(t, "dlq", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{
			"QueueName": "jobs-dlq.fifo", "FifoQueue": true, "KmsMasterKeyId": assertions.Match_AnyValue(),
			"MessageRetentionPeriod": 14 * 86400,
			"RedriveAllowPolicy": map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []any{map[string]any{"Fn::Join": []any{"", []any{
				"arn:", map[string]any{"Ref": "AWS::Partition"}, ":sqs:", map[string]any{"Ref": "AWS::Region"}, ":", map[string]any{"Ref": "AWS::AccountId"}, ":jobs.fifo",
			}}}}},
		})
	})
	check(t, "mapping", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
			"BatchSize": 5, "FunctionResponseTypes": []any{"ReportBatchItemFailures"},
		})
	})
	check(t, "no alarm actions without a topic", func() {
		tpl.AllResourcesProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{"AlarmActions": assertions.Match_Absent()})
	})
}

// TestVisibilityFromConsumers checks that a queue whose visibility timeout
// was not given gets what its Lambda consumers need, and that a given one
// is left alone when it suffices.
func TestVisibilityFromConsumers(t *testing.T) {
	s := newStack()
	q := sqsinfra.NewJobQueue(s, "Q", nil)
	sqsinfra.NewLambdaConsumer(s, "A", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: secs(20)})
	sqsinfra.NewLambdaConsumer(s, "B", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: secs(40), MaxBatchingWindow: secs(10)})
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Timeout: secs(5)})
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "raised to the largest need", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{"VisibilityTimeout": 250}) // 6 × 40 + 10
	})
	if got := *q.VisibilityTimeout.ToSeconds(nil); got != 250 {
		t.Errorf("JobQueue.VisibilityTimeout = %gs, want 250s", got)
	}

	s = newStack()
	q = sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: awscdk.Duration_Minutes(jsii.Number(10))})
	sqsinfra.NewLambdaConsumer(s, "A", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir})
	check(t, "given and enough", func() {
		assertions.Template_FromStack(s, nil).HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{"VisibilityTimeout": 600})
	})
}

// TestImportJobQueue attaches consumers, alarms and a dashboard to an
// existing queue, which the stack does not define.
func TestImportJobQueue(t *testing.T) {
	s := newStack()
	arn := "arn:aws:sqs:eu-west-1:123456789012:orders"
	q := sqsinfra.ImportJobQueue(s, "Orders", &sqsinfra.ExistingJobQueueProps{
		Queue:             awssqs.Queue_FromQueueArn(s, jsii.String("Existing"), jsii.String(arn)),
		DeadLetterQueue:   awssqs.Queue_FromQueueArn(s, jsii.String("ExistingDlq"), jsii.String(arn+"-dlq")),
		VisibilityTimeout: awscdk.Duration_Minutes(jsii.Number(5)),
		MaxReceiveCount:   jsii.Number(5),
		Alarms:            sqsinfra.QueueAlarmProps{CreateTopic: true},
	})
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir})
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler()})
	sqsinfra.NewDashboard(s, "D", &sqsinfra.DashboardProps{Queue: q})
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "no queue defined", func() { tpl.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(0)) })
	check(t, "mapping on the existing queue", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{"EventSourceArn": arn})
	})
	check(t, "alarms on the existing queue", func() {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"MetricName": "ApproximateAgeOfOldestMessage", "Threshold": 900,
			"Dimensions":   []any{map[string]any{"Name": "QueueName", "Value": "orders"}},
			"AlarmActions": []any{map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^OrdersAlarmTopic"))}},
		})
	})
	// 4 queue alarms, 2 Lambda alarms, 3 poller alarms (MinTasks 1: no
	// scale from zero).
	check(t, "alarm count", func() { tpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(9)) })
}

// TestDesiredTasksOptIn checks that DesiredCount appears only when asked
// for.
func TestDesiredTasksOptIn(t *testing.T) {
	for _, desired := range []*float64{nil, jsii.Number(2)} {
		s := newStack()
		q := sqsinfra.NewJobQueue(s, "Q", nil)
		sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(), DesiredTasks: desired})
		var want any = assertions.Match_Absent()
		if desired != nil {
			want = *desired
		}
		check(t, fmt.Sprintf("DesiredTasks %v", desired), func() {
			assertions.Template_FromStack(s, nil).HasResourceProperties(jsii.String("AWS::ECS::Service"), map[string]any{"DesiredCount": want})
		})
	}
}

// TestScalingTarget checks the target derived from the latency budget,
// the job duration and the concurrency, the explicit one, and that the
// scale-from-zero step policy exists only with MinTasks 0.
func TestScalingTarget(t *testing.T) {
	if got := sqsinfra.BacklogPerTaskTarget(900, 1, 10); got != 4500 {
		t.Errorf("BacklogPerTaskTarget(900, 1, 10) = %g, want 4500", got)
	}
	for _, tc := range []struct {
		name   string
		props  sqsinfra.PollerServiceProps
		target float64
		steps  float64
	}{
		{"defaults", sqsinfra.PollerServiceProps{}, 4500, 0}, // 900 / 2 / 1 × 10
		{"from the job", sqsinfra.PollerServiceProps{JobDuration: awscdk.Duration_Millis(jsii.Number(250)), Concurrency: jsii.Number(4)}, 7200, 0}, // 900 / 2 / 0.25 × 4
		{"explicit, to zero", sqsinfra.PollerServiceProps{BacklogPerTask: jsii.Number(100), MinTasks: jsii.Number(0)}, 100, 1},
	} {
		s := newStack()
		p := tc.props
		p.Queue, p.Image, p.Handler = sqsinfra.NewJobQueue(s, "Q", nil), image(), handler()
		svc := sqsinfra.NewPollerService(s, "P", &p)
		if svc.BacklogPerTaskTarget != tc.target {
			t.Errorf("%s: target %g, want %g", tc.name, svc.BacklogPerTaskTarget, tc.target)
		}
		tpl := assertions.Template_FromStack(s, nil)
		check(t, tc.name+": target", func() {
			tpl.HasResourceProperties(jsii.String("AWS::ApplicationAutoScaling::ScalingPolicy"), map[string]any{
				"PolicyType": "TargetTrackingScaling",
				"TargetTrackingScalingPolicyConfiguration": assertions.Match_ObjectLike(&map[string]any{"TargetValue": tc.target}),
			})
		})
		check(t, tc.name+": step policies", func() {
			tpl.ResourcePropertiesCountIs(jsii.String("AWS::ApplicationAutoScaling::ScalingPolicy"), map[string]any{"PolicyType": "StepScaling"}, jsii.Number(tc.steps))
		})
		if cmd := fmt.Sprint(resourcesOf(tpl, "AWS::ECS::TaskDefinition")); !strings.Contains(cmd, "--concurrency") {
			t.Errorf("%s: no --concurrency in %s", tc.name, cmd)
		}
	}
}

// TestHandlerURLAndCommand checks the worker's command with an endpoint
// outside the task, and with a command of one's own.
func TestHandlerURLAndCommand(t *testing.T) {
	s := newStack()
	q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{MetricsNamespace: jsii.String("orders")})
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), HandlerURL: jsii.String("https://api.internal/jobs"),
		Concurrency: jsii.Number(32), ShutdownTimeout: secs(90), StopTimeout: secs(120), HandlerName: jsii.String("orders")})
	check(t, "handler URL", func() {
		assertions.Template_FromStack(s, nil).HasResourceProperties(jsii.String("AWS::ECS::TaskDefinition"), map[string]any{
			"ContainerDefinitions": []any{assertions.Match_ObjectLike(&map[string]any{
				"Name": "Worker",
				"Command": []any{"run", assertions.Match_AnyValue(), "--http", "https://api.internal/jobs", "--concurrency", "32",
					"--shutdown-timeout", "1m30s", "--metrics", "emf", "--metrics-namespace", "orders", "--handler-name", "orders", "--scale-in-protection"},
				"StopTimeout": 120,
				"DependsOn":   assertions.Match_Absent(),
			})},
		})
	})

	s = newStack()
	q = sqsinfra.NewJobQueue(s, "Q", nil)
	// A URL holding a token (a load balancer's DNS name) is left to
	// CloudFormation.
	sqsinfra.NewPollerService(s, "T", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), HandlerURL: jsii.String("http://api." + *awscdk.Aws_URL_SUFFIX() + "/jobs")})
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Command: []string{"run", "jobs", "--", "/bin/job"}})
	check(t, "command", func() {
		assertions.Template_FromStack(s, nil).HasResourceProperties(jsii.String("AWS::ECS::TaskDefinition"), map[string]any{
			"ContainerDefinitions": []any{assertions.Match_ObjectLike(&map[string]any{
				"Command":         []any{"run", "jobs", "--", "/bin/job"},
				"LinuxParameters": assertions.Match_ObjectLike(&map[string]any{"InitProcessEnabled": true}),
			})},
		})
	})
}

// statementsOf returns the statements of the IAM policies in tpl whose
// logical id starts with prefix.
func statementsOf(t *testing.T, tpl assertions.Template, prefix string) []any {
	t.Helper()
	var out []any
	for id, r := range resourcesOf(tpl, "AWS::IAM::Policy") {
		if strings.HasPrefix(id, prefix) {
			doc, _ := props(r)["PolicyDocument"].(map[string]any)
			st, _ := doc["Statement"].([]any)
			out = append(out, st...)
		}
	}
	return out
}

// actionsOn returns the actions of statements, by resource (as JSON).
func actionsOn(statements []any) map[string][]string {
	out := map[string][]string{}
	for _, s := range statements {
		m, _ := s.(map[string]any)
		resources, ok := m["Resource"].([]any)
		if !ok {
			resources = []any{m["Resource"]}
		}
		for _, res := range resources {
			r, _ := json.Marshal(res)
			switch a := m["Action"].(type) {
			case string:
				out[string(r)] = append(out[string(r)], a)
			case []any:
				for _, x := range a {
					out[string(r)] = append(out[string(r)], fmt.Sprint(x))
				}
			}
		}
	}
	for r := range out {
		sort.Strings(out[r])
	}
	return out
}

// TestTableGrants checks the grants of the idempotency store, of the
// effect tables (including ConditionCheckItem; no TransactWriteItems,
// which is not an IAM action) and of their KMS keys, on both consumers.
func TestTableGrants(t *testing.T) {
	s := newStack()
	key := awskms.NewKey(s, jsii.String("TableKey"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
	table := sqsinfra.NewIdempotencyTable(s, "T", &sqsinfra.IdempotencyTableProps{EncryptionKey: key})
	accounts := awsdynamodb.NewTable(s, jsii.String("Accounts"), &awsdynamodb.TableProps{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String("id"), Type: awsdynamodb.AttributeType_STRING},
	})
	ledger := awsdynamodb.Table_FromTableName(s, jsii.String("Ledger"), jsii.String("ledger"))
	q := sqsinfra.NewJobQueue(s, "Q", nil)
	effects := []awsdynamodb.ITable{accounts, ledger}
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Table: table, EffectTables: effects})
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(), Table: table, EffectTables: effects})
	tpl := assertions.Template_FromStack(s, nil)
	for _, prefix := range []string{"CRoleDefaultPolicy", "PTaskDefinitionTaskRoleDefaultPolicy"} {
		got := actionsOn(statementsOf(t, tpl, prefix))
		want := map[string][]string{
			ref(tpl, "AWS::DynamoDB::Table", "TTable"):   {"dynamodb:DeleteItem", "dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
			ref(tpl, "AWS::DynamoDB::Table", "Accounts"): {"dynamodb:ConditionCheckItem", "dynamodb:DeleteItem", "dynamodb:DescribeTable", "dynamodb:PutItem", "dynamodb:UpdateItem"},
			ledgerArn:   {"dynamodb:ConditionCheckItem", "dynamodb:DeleteItem", "dynamodb:DescribeTable", "dynamodb:PutItem", "dynamodb:UpdateItem"},
			keyArn(tpl): {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"},
		}
		for res, actions := range want {
			if !reflect.DeepEqual(got[res], actions) {
				t.Errorf("%s: actions on %s = %v, want %v", prefix, res, got[res], actions)
			}
		}
		for res, actions := range got {
			for _, a := range actions {
				if strings.Contains(a, "*") && !strings.HasPrefix(a, "kms:") || a == "dynamodb:TransactWriteItems" || strings.HasPrefix(a, "dynamodb:Batch") || a == "dynamodb:Scan" || a == "dynamodb:Query" {
					t.Errorf("%s: %s on %s", prefix, a, res)
				}
			}
		}
	}
}

// ledgerArn is the ARN of the imported table "ledger", as JSON.
const ledgerArn = `{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":dynamodb:",{"Ref":"AWS::Region"},":",{"Ref":"AWS::AccountId"},":table/ledger"]]}`

func firstID(tpl assertions.Template, typ, prefix string) string {
	for id := range resourcesOf(tpl, typ) {
		if strings.HasPrefix(id, prefix) {
			return id
		}
	}
	return ""
}

// ref is the JSON of the Fn::GetAtt Arn of the resource of typ whose id
// starts with prefix.
func ref(tpl assertions.Template, typ, prefix string) string {
	b, _ := json.Marshal(map[string]any{"Fn::GetAtt": []any{firstID(tpl, typ, prefix), "Arn"}})
	return string(b)
}

func keyArn(tpl assertions.Template) string { return ref(tpl, "AWS::KMS::Key", "TableKey") }

// TestLambdaOptions checks reserved concurrency, filter criteria, tracing
// and a VPC.
func TestLambdaOptions(t *testing.T) {
	s := newStack()
	q := sqsinfra.NewJobQueue(s, "Q", nil)
	vpc := awsec2.NewVpc(s, jsii.String("Vpc"), nil)
	filter := map[string]any{"body": map[string]any{"kind": []any{"order"}}}
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir,
		ReservedConcurrency: jsii.Number(20), MaxConcurrency: jsii.Number(20), Filters: []map[string]any{filter},
		Tracing: awslambda.Tracing_ACTIVE, Vpc: vpc, DisableErrorAlarm: true})
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "function", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), map[string]any{
			"ReservedConcurrentExecutions": 20,
			"TracingConfig":                map[string]any{"Mode": "Active"},
			"VpcConfig":                    assertions.Match_ObjectLike(&map[string]any{"SubnetIds": assertions.Match_AnyValue()}),
		})
	})
	pattern, _ := json.Marshal(filter)
	check(t, "mapping", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
			"FilterCriteria": map[string]any{"Filters": []any{map[string]any{"Pattern": string(pattern)}}},
			"ScalingConfig":  map[string]any{"MaximumConcurrency": 20},
		})
	})
	got := actionsOn(statementsOf(t, tpl, "CRoleDefaultPolicy"))
	if eni := got[`"*"`]; !reflect.DeepEqual(eni, []string{"ec2:AssignPrivateIpAddresses", "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface",
		"ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:UnassignPrivateIpAddresses", "xray:PutTelemetryRecords", "xray:PutTraceSegments"}) {
		t.Errorf("actions on *: %v", eni)
	}
	check(t, "one alarm left", func() {
		tpl.ResourcePropertiesCountIs(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{"Namespace": "AWS/Lambda"}, jsii.Number(1))
	})
}

// TestNetworkVpcEndpoints checks the network without a NAT gateway.
func TestNetworkVpcEndpoints(t *testing.T) {
	s := newStack()
	n := sqsinfra.NewNetwork(s, "Net", &sqsinfra.NetworkProps{VpcEndpoints: true})
	q := sqsinfra.NewJobQueue(s, "Q", nil)
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(), Network: n})
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "no NAT gateway", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(0)) })
	check(t, "no internet gateway", func() { tpl.ResourceCountIs(jsii.String("AWS::EC2::InternetGateway"), jsii.Number(0)) })
	var services []string
	for _, r := range resourcesOf(tpl, "AWS::EC2::VPCEndpoint") {
		b, _ := json.Marshal(props(r)["ServiceName"])
		services = append(services, fmt.Sprint(props(r)["VpcEndpointType"])+" "+string(b[strings.LastIndex(string(b), ".")+1:strings.LastIndex(string(b), `"`)]))
	}
	for _, want := range []string{"Interface sqs", "Interface api", "Interface dkr", "Interface logs", "Gateway s3", "Gateway dynamodb"} {
		found := false
		for _, s := range services {
			found = found || s == want
		}
		if !found {
			t.Errorf("no %s endpoint among %v", want, services)
		}
	}
	if len(services) != 6 {
		t.Errorf("%d endpoints, want 6: %v", len(services), services)
	}
	check(t, "tasks in the isolated subnets", func() {
		tpl.HasResourceProperties(jsii.String("AWS::ECS::Service"), map[string]any{
			"NetworkConfiguration": map[string]any{"AwsvpcConfiguration": assertions.Match_ObjectLike(&map[string]any{
				"Subnets": []any{
					map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^NetVpcTasksSubnet1"))},
					map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^NetVpcTasksSubnet2"))},
				},
			})},
		})
	})
}

// TestDefaultNetworkShared checks that the PollerServices of a stack share
// one VPC, NAT gateway and cluster.
func TestDefaultNetworkShared(t *testing.T) {
	s := newStack()
	for _, id := range []string{"A", "B", "C"} {
		q := sqsinfra.NewJobQueue(s, "Q"+id, nil)
		sqsinfra.NewPollerService(s, id, &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler()})
	}
	tpl := assertions.Template_FromStack(s, nil)
	for typ, n := range map[string]float64{"AWS::EC2::VPC": 1, "AWS::EC2::NatGateway": 1, "AWS::ECS::Cluster": 1, "AWS::ECS::Service": 3} {
		check(t, typ, func() { tpl.ResourceCountIs(jsii.String(typ), jsii.Number(n)) })
	}
	if a, b := sqsinfra.DefaultNetwork(s), sqsinfra.DefaultNetwork(s); a != b || a == nil {
		t.Errorf("DefaultNetwork returned %p then %p", a, b)
	}
}

// TestImportedClusterWarns checks the warning for a cluster whose Container
// Insights setting cannot be read, and that a cluster with it passes.
func TestImportedClusterWarns(t *testing.T) {
	s := newStack()
	vpc := awsec2.NewVpc(s, jsii.String("Vpc"), nil)
	imported := awsecs.Cluster_FromClusterAttributes(s, jsii.String("Imported"), &awsecs.ClusterAttributes{ClusterName: jsii.String("shared"), Vpc: vpc})
	q := sqsinfra.NewJobQueue(s, "Q", nil)
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(), Cluster: imported})
	with := awsecs.NewCluster(s, jsii.String("WithInsights"), &awsecs.ClusterProps{Vpc: vpc, ContainerInsightsV2: awsecs.ContainerInsights_ENHANCED})
	sqsinfra.NewPollerService(s, "P2", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(), Cluster: with})
	warns := assertions.Annotations_FromStack(s).FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("Container Insights")))
	var ids []string
	for _, w := range *warns {
		//lint:ignore SA1019 Annotations.FindWarning returns this type and no other
		ids = append(ids, *w.Id)
	}
	if !reflect.DeepEqual(ids, []string{"/Test/P"}) {
		t.Errorf("Container Insights warnings at %v, want one at /Test/P", ids)
	}
}

// TestAlarmOptions checks the alarms' switches and settings, and the topic
// a consumer is given.
func TestAlarmOptions(t *testing.T) {
	s := newStack()
	own := awssns.NewTopic(s, jsii.String("Own"), nil)
	q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Alarms: sqsinfra.QueueAlarmProps{
		CreateTopic: true, DisableDeadLetter: true, DisableAge: true, DisableDepth: true, BreakerOpenFor: awscdk.Duration_Minutes(jsii.Number(15)),
	}})
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, AlarmTopic: own, DisableThrottleAlarm: true})
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(),
		DisableCPUAlarm: true, DisableMemoryAlarm: true, TaskShortfallAlarmAfter: awscdk.Duration_Minutes(jsii.Number(3))})
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "three alarms", func() { tpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(3)) })
	check(t, "breaker after 15 minutes", func() {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"EvaluationPeriods": 15, "DatapointsToAlarm": 15,
			"AlarmActions": []any{map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^QAlarmTopic"))}},
		})
	})
	check(t, "Lambda errors to its own topic", func() {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"MetricName": "Errors", "AlarmActions": []any{map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^Own"))}},
		})
	})
	check(t, "shortfall after 3 minutes", func() {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{"EvaluationPeriods": 3, "Threshold": 0})
	})
}

func TestQueueNames(t *testing.T) {
	s := newStack()
	sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{QueueName: jsii.String("orders")})
	sqsinfra.NewJobQueue(s, "F", &sqsinfra.JobQueueProps{Fifo: true, RemovalPolicy: awscdk.RemovalPolicy_DESTROY})
	tpl := assertions.Template_FromStack(s, nil)
	for _, name := range []string{"orders", "orders-dlq"} {
		check(t, name, func() {
			tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{"QueueName": name})
		})
	}
	// Generated FIFO names: the construct path, the stack ID's first
	// group, and the suffixes.
	stackID := map[string]any{"Fn::Select": []any{0, map[string]any{"Fn::Split": []any{"-",
		map[string]any{"Fn::Select": []any{2, map[string]any{"Fn::Split": []any{"/", map[string]any{"Ref": "AWS::StackId"}}}}}}}}}
	for _, suffix := range []string{".fifo", "-dlq.fifo"} {
		check(t, "FIFO "+suffix, func() {
			tpl.HasResource(jsii.String("AWS::SQS::Queue"), map[string]any{
				"Properties":     assertions.Match_ObjectLike(&map[string]any{"FifoQueue": true, "QueueName": map[string]any{"Fn::Join": []any{"", []any{"Test-F-B39C02ED-", stackID, suffix}}}}),
				"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete",
			})
		})
	}
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

// TestDelayAndBatchGrants checks that both runtimes may send to the queue
// they consume (waiting copies of delayed jobs) and that GrantBatchRead
// gives what `sqsworker batch show` calls, the batch read included, and no
// write.
func TestDelayAndBatchGrants(t *testing.T) {
	s := newStack()
	table := sqsinfra.NewIdempotencyTable(s, "T", nil)
	q := sqsinfra.NewJobQueue(s, "Q", nil)
	sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir, Table: table})
	sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(), Table: table})
	ops := awsiam.NewRole(s, jsii.String("Operators"), &awsiam.RoleProps{AssumedBy: awsiam.NewAccountRootPrincipal()})
	table.GrantBatchRead(ops)
	tpl := assertions.Template_FromStack(s, nil)
	queueArn := fmt.Sprintf(`{"Fn::GetAtt":[%q,"Arn"]}`, firstID(tpl, "AWS::SQS::Queue", "QQueue"))
	for _, prefix := range []string{"CRoleDefaultPolicy", "PTaskDefinitionTaskRoleDefaultPolicy"} {
		got := actionsOn(statementsOf(t, tpl, prefix))[queueArn]
		if !slices.Contains(got, "sqs:SendMessage") || !slices.Contains(got, "sqs:ReceiveMessage") {
			t.Errorf("%s: actions on the queue %s = %v, want receive and send", prefix, queueArn, got)
		}
		// `sqsworker run` lists the queue's dead-letter sources, to refuse
		// a dead-letter queue given by mistake.
		if poller := prefix == "PTaskDefinitionTaskRoleDefaultPolicy"; poller && !slices.Contains(got, "sqs:ListDeadLetterSourceQueues") {
			t.Errorf("%s: actions on the queue %s = %v, want sqs:ListDeadLetterSourceQueues", prefix, queueArn, got)
		}
	}
	got := actionsOn(statementsOf(t, tpl, "OperatorsDefaultPolicy"))[ref(tpl, "AWS::DynamoDB::Table", "TTable")]
	want := []string{"dynamodb:BatchGetItem", "dynamodb:DescribeTable", "dynamodb:GetItem"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GrantBatchRead: actions on the table = %v, want %v", got, want)
	}
}

// A dashboard of a Lambda consumer graphs its handler's latency under the
// function's name, the handler dimension the Lambda runtime gives its
// metrics (before, under "handler": an empty graph).
func TestDashboardOfALambdaConsumer(t *testing.T) {
	s := newStack()
	q := sqsinfra.NewJobQueue(s, "Q", nil)
	c := sqsinfra.NewLambdaConsumer(s, "C", &sqsinfra.LambdaConsumerProps{Queue: q, CodeDir: &codeDir})
	sqsinfra.NewDashboard(s, "D", &sqsinfra.DashboardProps{Queue: q, Consumer: c})
	var body []byte
	for _, r := range resourcesOf(assertions.Template_FromStack(s, nil), "AWS::CloudWatch::Dashboard") {
		body, _ = json.Marshal(props(r)["DashboardBody"])
	}
	fn := *awscdk.Stack_Of(c.Function).GetLogicalId(c.Function.Node().DefaultChild().(awscdk.CfnElement))
	if want := `handler_duration\",\"handler\",\"",{"Ref":"` + fn + `"}`; !strings.Contains(string(body), want) {
		t.Errorf("the dashboard does not graph handler_duration under the function's name (%s): %s", fn, body)
	}
	if strings.Contains(string(body), `\"handler\",\"handler\"`) {
		t.Errorf("the dashboard graphs the default handler name: %s", body)
	}
}

// TestScaleInProtection checks that a poller's task role may set its
// task's scale-in protection, on the cluster's tasks only, and that the
// default command asks for it; DisableScaleInProtection turns both off.
func TestScaleInProtection(t *testing.T) {
	for _, disable := range []bool{false, true} {
		s := newStack()
		q := sqsinfra.NewJobQueue(s, "Q", nil)
		sqsinfra.NewPollerService(s, "P", &sqsinfra.PollerServiceProps{Queue: q, Image: image(), Handler: handler(), DisableScaleInProtection: disable})
		tpl := assertions.Template_FromStack(s, nil)
		var protect []string
		for res, actions := range actionsOn(append(statementsOf(t, tpl, "PTaskDefinitionTaskRoleDefaultPolicy"), statementsOf(t, tpl, "PScaleInProtection")...)) {
			for _, a := range actions {
				if strings.HasPrefix(a, "ecs:") {
					protect = append(protect, a+" on "+res)
				}
			}
		}
		sort.Strings(protect)
		cluster := firstID(tpl, "AWS::ECS::Cluster", "")
		want := []string{}
		if !disable {
			arn := `{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":ecs:",{"Ref":"AWS::Region"},":",{"Ref":"AWS::AccountId"},":task/",{"Ref":"` + cluster + `"},"/*"]]}`
			want = []string{"ecs:UpdateTaskProtection on " + arn}
		}
		if !reflect.DeepEqual(protect, want) && !(len(protect) == 0 && len(want) == 0) {
			t.Errorf("disable %v: task role's ECS actions\n%q\nwant\n%q", disable, protect, want)
		}
		var command []any
		for _, r := range resourcesOf(tpl, "AWS::ECS::TaskDefinition") {
			for _, c := range props(r)["ContainerDefinitions"].([]any) {
				if c.(map[string]any)["Name"] == "Worker" {
					command = c.(map[string]any)["Command"].([]any)
				}
			}
		}
		if got := len(command) > 0 && command[len(command)-1] == "--scale-in-protection"; got == disable {
			t.Errorf("disable %v: command %v", disable, command)
		}
	}
}
