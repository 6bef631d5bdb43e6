package exampleapp_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/sqsworker/sqsworker/infra/exampleapp"
)

var update = flag.Bool("update", false, "rewrite the golden template in ../testdata")

const golden = "../testdata/SqsWorkerExample.template.json"

// Synthesized once per test binary by TestMain.
var (
	stack    *exampleapp.Stack
	template assertions.Template
	annots   assertions.Annotations
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer jsii.Close()
	dir, err := os.MkdirTemp("", "sqsinfra-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// A stand-in bootstrap: its content fixes the asset hash in the golden
	// template.
	code := filepath.Join(dir, "lambda")
	if err := os.MkdirAll(code, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(code, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A stand-in build context: its content fixes the image asset hash in
	// the golden template (the real one, the repository root, changes with
	// every commit). Synthesis never runs Docker.
	image := filepath.Join(dir, "image")
	if err := os.MkdirAll(image, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(image, "Dockerfile"), []byte("FROM scratch\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(filepath.Join(dir, "cdk.out"))})
	stack = exampleapp.New(app, &exampleapp.Props{CodeDir: code, ImageDir: image})
	exampleapp.Check(app)
	template = assertions.Template_FromStack(stack.Stack, nil)
	annots = assertions.Annotations_FromStack(stack.Stack)
	return m.Run()
}

// must runs an assertion, which panics with its diff on a mismatch.
func must(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

func has(t *testing.T, typ string, props map[string]any) {
	t.Helper()
	must(t, typ, func() { template.HasResourceProperties(jsii.String(typ), props) })
}

func count(t *testing.T, typ string, n float64) {
	t.Helper()
	must(t, typ+" count", func() { template.ResourceCountIs(jsii.String(typ), jsii.Number(n)) })
}

func TestJobQueueRedriveAndDLQ(t *testing.T) {
	count(t, "AWS::SQS::Queue", 2)
	has(t, "AWS::SQS::Queue", map[string]any{
		"VisibilityTimeout":    180,
		"SqsManagedSseEnabled": true,
		"RedrivePolicy": map[string]any{
			"maxReceiveCount":     5,
			"deadLetterTargetArn": assertions.Match_AnyValue(),
		},
	})
	has(t, "AWS::SQS::Queue", map[string]any{
		"MessageRetentionPeriod": 14 * 86400,
		"SqsManagedSseEnabled":   true,
		"RedrivePolicy":          assertions.Match_Absent(),
	})
}

func TestJobQueueEnforcesTLS(t *testing.T) {
	count(t, "AWS::SQS::QueuePolicy", 2)
	must(t, "TLS deny statement", func() {
		template.AllResourcesProperties(jsii.String("AWS::SQS::QueuePolicy"), map[string]any{
			"PolicyDocument": map[string]any{
				"Statement": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
					"Effect":    "Deny",
					"Action":    "sqs:*",
					"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				})}),
			},
		})
	})
}

func TestJobQueueAlarms(t *testing.T) {
	count(t, "AWS::CloudWatch::Alarm", 3)
	for _, a := range []map[string]any{
		{"MetricName": "ApproximateNumberOfMessagesVisible", "Threshold": 0, "EvaluationPeriods": 1, "ComparisonOperator": "GreaterThanThreshold"},
		{"MetricName": "ApproximateAgeOfOldestMessage", "Threshold": 900, "EvaluationPeriods": 5},
		{"MetricName": "ApproximateNumberOfMessagesVisible", "Threshold": 1000, "EvaluationPeriods": 5},
	} {
		a["Namespace"] = "AWS/SQS"
		a["AlarmActions"] = assertions.Match_ArrayWith(&[]any{map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("AlarmTopic"))}})
		a["OKActions"] = assertions.Match_AnyValue()
		has(t, "AWS::CloudWatch::Alarm", a)
	}
}

func TestIdempotencyTable(t *testing.T) {
	count(t, "AWS::DynamoDB::Table", 1)
	has(t, "AWS::DynamoDB::Table", map[string]any{
		"KeySchema":                        []any{map[string]any{"AttributeName": "id", "KeyType": "HASH"}},
		"AttributeDefinitions":             []any{map[string]any{"AttributeName": "id", "AttributeType": "S"}},
		"BillingMode":                      "PAY_PER_REQUEST",
		"TimeToLiveSpecification":          map[string]any{"AttributeName": "expiry", "Enabled": true},
		"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
		"SSESpecification":                 map[string]any{"SSEEnabled": true},
	})
}

func TestLambdaConsumer(t *testing.T) {
	has(t, "AWS::Lambda::Function", map[string]any{
		"Runtime":       "provided.al2023",
		"Architectures": []any{"arm64"},
		"Handler":       "bootstrap",
		"Timeout":       30,
		"MemorySize":    256,
		"Environment": map[string]any{"Variables": map[string]any{
			"IDEMPOTENCY_TABLE": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("Idempotency"))},
		}},
	})
	has(t, "AWS::Lambda::EventSourceMapping", map[string]any{
		"BatchSize":                      10,
		"MaximumBatchingWindowInSeconds": 1,
		"ScalingConfig":                  map[string]any{"MaximumConcurrency": 10},
		"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
	})
}

// policiesOf is the JSON of the IAM policies whose logical id starts with
// prefix.
func policiesOf(t *testing.T, prefix string) []byte {
	t.Helper()
	pols := map[string]any{}
	for id, p := range *template.FindResources(jsii.String("AWS::IAM::Policy"), nil) {
		if strings.HasPrefix(id, prefix) {
			pols[id] = p
		}
	}
	if len(pols) == 0 {
		t.Fatalf("no IAM policy starts with %s", prefix)
	}
	b, _ := json.Marshal(pols)
	return b
}

func TestLambdaConsumerPermissions(t *testing.T) {
	b := policiesOf(t, "ConsumerFunction")
	for _, action := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"} {
		if !bytes.Contains(b, []byte(`"`+action+`"`)) {
			t.Errorf("the consumer's policy lacks %s: %s", action, b)
		}
	}
	for _, wide := range []string{`"sqs:*"`, `"dynamodb:*"`, `"Resource":"*"`} {
		if bytes.Contains(b, []byte(wide)) {
			t.Errorf("the consumer's policy has %s: %s", wide, b)
		}
	}
}

func TestPollerServiceContainerInsights(t *testing.T) {
	count(t, "AWS::ECS::Cluster", 1)
	has(t, "AWS::ECS::Cluster", map[string]any{
		"ClusterSettings": []any{map[string]any{"Name": "containerInsights", "Value": "enabled"}},
	})
	has(t, "AWS::ECS::Service", map[string]any{
		"LaunchType":   "FARGATE",
		"DesiredCount": 1,
	})
}

func TestPollerServiceTaskDefinition(t *testing.T) {
	queue := map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^JobsQueue"))}
	has(t, "AWS::ECS::TaskDefinition", map[string]any{
		"RequiresCompatibilities": []any{"FARGATE"},
		"Cpu":                     "256",
		"Memory":                  "512",
		"RuntimePlatform":         map[string]any{"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"},
		"ContainerDefinitions": []any{assertions.Match_ObjectLike(&map[string]any{
			"Name":        "Worker",
			"StopTimeout": 30, // >= the worker's 25s ShutdownTimeout + 5s
			"Command":     []any{"run", queue, "--http", "http://127.0.0.1:8080/jobs", "--metrics", "emf"},
			"Environment": assertions.Match_ArrayWith(&[]any{
				map[string]any{"Name": "IDEMPOTENCY_TABLE", "Value": map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^Idempotency"))}},
				map[string]any{"Name": "QUEUE_URL", "Value": queue},
			}),
			"LogConfiguration": assertions.Match_ObjectLike(&map[string]any{"LogDriver": "awslogs"}),
			"Image":            map[string]any{"Fn::Sub": assertions.Match_StringLikeRegexp(jsii.String("container-assets"))},
		})},
	})
}

func TestPollerServiceScalesOnBacklogPerTask(t *testing.T) {
	has(t, "AWS::ApplicationAutoScaling::ScalableTarget", map[string]any{
		"MinCapacity": 1, "MaxCapacity": 10,
		"ScalableDimension": "ecs:service:DesiredCount", "ServiceNamespace": "ecs",
	})
	metric := func(id, ns, name, stat string) map[string]any {
		return map[string]any{
			"Id": id, "ReturnData": false,
			"MetricStat": map[string]any{"Stat": stat, "Metric": assertions.Match_ObjectLike(&map[string]any{"Namespace": ns, "MetricName": name})},
		}
	}
	has(t, "AWS::ApplicationAutoScaling::ScalingPolicy", map[string]any{
		"PolicyType": "TargetTrackingScaling",
		"TargetTrackingScalingPolicyConfiguration": assertions.Match_ObjectLike(&map[string]any{
			"TargetValue": 100,
			"CustomizedMetricSpecification": map[string]any{"Metrics": []any{
				metric("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Sum"),
				metric("running", "ECS/ContainerInsights", "RunningTaskCount", "Average"),
				assertions.Match_ObjectLike(&map[string]any{"Id": "backlogPerTask", "Expression": "visible / running", "ReturnData": true}),
			}},
		}),
	})
}

func TestPollerServicePermissions(t *testing.T) {
	b := policiesOf(t, "PollerTaskDefinitionTaskRole")
	var doc struct {
		Statement []struct {
			Action []string
		}
	}
	var got []string
	var pols map[string]struct {
		Properties struct{ PolicyDocument json.RawMessage }
	}
	if err := json.Unmarshal(b, &pols); err != nil {
		t.Fatal(err)
	}
	for _, p := range pols {
		if err := json.Unmarshal(p.Properties.PolicyDocument, &doc); err != nil {
			t.Fatal(err)
		}
		for _, s := range doc.Statement {
			got = append(got, s.Action...)
		}
	}
	for _, a := range got {
		if strings.Contains(a, "*") {
			t.Errorf("the task role has the wildcard action %s", a)
		}
	}
	for _, want := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes", "sqs:SendMessage", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"} {
		if !strings.Contains(string(b), `"`+want+`"`) {
			t.Errorf("the task role lacks %s: %s", want, b)
		}
	}
	if strings.Contains(string(b), `"Resource":"*"`) || strings.Contains(string(b), "sqs:PurgeQueue") {
		t.Errorf("the task role is too wide: %s", b)
	}
}

func TestDashboard(t *testing.T) {
	count(t, "AWS::CloudWatch::Dashboard", 1)
	dash := template.FindResources(jsii.String("AWS::CloudWatch::Dashboard"), nil)
	b, _ := json.Marshal(dash)
	body := string(b)
	for _, want := range []string{
		"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "NumberOfMessagesReceived", "NumberOfMessagesDeleted",
		`SEARCH('{sqsworker,queue,handler,error_class} MetricName=\\\"messages_failed\\\"`,
		"handler_duration", `\"stat\":\"p50\"`, `\"stat\":\"p99\"`,
		`\"AWS/Lambda\",\"Errors\"`, `\"AWS/Lambda\",\"Throttles\"`,
		"JobsDeadLetterQueue",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the dashboard lacks %s", want)
		}
	}
}

func TestOperatorPolicy(t *testing.T) {
	dlq := map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^JobsDeadLetterQueue")), "Arn"}}
	has(t, "AWS::IAM::ManagedPolicy", map[string]any{
		"PolicyDocument": map[string]any{"Statement": []any{
			map[string]any{"Sid": "InspectAndRedriveDeadLetterQueue", "Effect": "Allow", "Resource": dlq, "Action": []any{
				"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
				"sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks", "sqs:CancelMessageMoveTask",
			}},
			map[string]any{"Sid": "ReplayToSourceQueue", "Effect": "Allow",
				"Resource": map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^JobsQueue")), "Arn"}},
				"Action":   []any{"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}},
		}, "Version": "2012-10-17"},
	})
}

// The findings come as cxapi.SynthesisMessage, deprecated in favour of a type
// in @aws-cdk/cloud-assembly-api that the Go bindings do not have: the
// assertions API returns no other.
func TestNagAwsSolutions(t *testing.T) {
	errs := annots.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))
	for _, e := range *errs {
		//lint:ignore SA1019 Annotations.FindError returns this type and no other
		t.Errorf("cdk-nag error at %s: %v", *e.Id, e.Entry.Data)
	}
	warns := annots.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))
	for _, w := range *warns {
		//lint:ignore SA1019 Annotations.FindWarning returns this type and no other
		t.Errorf("cdk-nag warning at %s: %v", *w.Id, w.Entry.Data)
	}
}

func TestGoldenTemplate(t *testing.T) {
	got, err := json.MarshalIndent(template.ToJSON(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run `go test ./exampleapp -update` to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the template differs from %s; review the change and run `go test ./exampleapp -update` if it is intended\n%s", golden, firstDiff(want, got))
	}
}

// firstDiff shows the first differing line of want and got.
func firstDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, w, g)
		}
	}
	return ""
}
