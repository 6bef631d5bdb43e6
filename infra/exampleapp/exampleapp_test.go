package exampleapp_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/sqsworker/sqsworker/infra/exampleapp"
	"github.com/sqsworker/sqsworker/infra/internal/cdkjson"
)

var update = flag.Bool("update", false, "rewrite the golden template in ../testdata")

const golden = "../testdata/SqsWorkerExample.template.json"

// Synthesized once per test binary by TestMain.
var (
	stack    *exampleapp.Stack
	template assertions.Template
	annots   assertions.Annotations
	// resources is the template's Resources, decoded.
	resources map[string]resource
)

type resource struct {
	Type                string
	Properties          map[string]any
	DeletionPolicy      string
	UpdateReplacePolicy string
	Metadata            map[string]any
}

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
	// Stand-ins whose content fixes the asset hashes in the golden
	// template: the bootstrap, and the build contexts of the worker image
	// (the real one, the repository root, changes with every commit) and
	// of the handler image. Synthesis never runs Docker.
	files := map[string]string{
		"lambda/bootstrap":   "#!/bin/sh\n",
		"image/Dockerfile":   "FROM scratch\n",
		"handler/Dockerfile": "FROM scratch\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// The feature flags of cdk.json, as `cdk synth` passes them.
	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(filepath.Join(dir, "cdk.out")), Context: cdkjson.MustContext()})
	stack = exampleapp.New(app, &exampleapp.Props{
		CodeDir: filepath.Join(dir, "lambda"), ImageDir: filepath.Join(dir, "image"), HandlerDir: filepath.Join(dir, "handler"),
	})
	exampleapp.Check(app)
	template = assertions.Template_FromStack(stack.Stack, nil)
	annots = assertions.Annotations_FromStack(stack.Stack)
	b, err := json.Marshal((*template.ToJSON())["Resources"])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.Unmarshal(b, &resources); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
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

// one returns the only resource of typ whose logical id starts with
// prefix.
func one(t *testing.T, typ, prefix string) (string, resource) {
	t.Helper()
	var ids []string
	for id, r := range resources {
		if r.Type == typ && strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d resources of type %s start with %s: %v", len(ids), typ, prefix, ids)
	}
	return ids[0], resources[ids[0]]
}

func ref(prefix string) map[string]any {
	return map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^" + prefix))}
}

func getAtt(prefix, attr string) map[string]any {
	return map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^" + prefix)), attr}}
}

// TestFeatureFlags checks that the tests synthesize with cdk.json's feature
// flags (cdkjson's own test checks that they are the CDK's recommended
// ones).
func TestFeatureFlags(t *testing.T) {
	ctx, err := cdkjson.Context()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, v := range ctx {
		want, ok := v.(bool)
		if !ok {
			continue
		}
		n++
		if got := awscdk.FeatureFlags_Of(stack.Stack).IsEnabled(jsii.String(k)); got == nil || *got != want {
			t.Errorf("feature flag %s: the stack has %v, cdk.json %t", k, got, want)
		}
	}
	if n < 50 {
		t.Errorf("cdk.json sets %d boolean feature flags; the CDK recommends more than 80", n)
	}
}

func TestJobQueueRedriveAndDLQ(t *testing.T) {
	count(t, "AWS::SQS::Queue", 2)
	stackID := map[string]any{"Fn::Select": []any{0, map[string]any{"Fn::Split": []any{"-",
		map[string]any{"Fn::Select": []any{2, map[string]any{"Fn::Split": []any{"/", map[string]any{"Ref": "AWS::StackId"}}}}}}}}}
	has(t, "AWS::SQS::Queue", map[string]any{
		// 6 × the consumer's 30 s timeout + its 1 s batching window, set by
		// the consumer since the queue's was not given.
		"VisibilityTimeout":    181,
		"SqsManagedSseEnabled": true,
		"QueueName":            map[string]any{"Fn::Join": []any{"", []any{"SqsWorkerExample-Jobs-141FE4F9-", stackID}}},
		"RedrivePolicy": map[string]any{
			"maxReceiveCount":     5,
			"deadLetterTargetArn": getAtt("JobsDeadLetterQueue", "Arn"),
		},
	})
	queueArn := map[string]any{"Fn::Join": []any{"", []any{
		"arn:", map[string]any{"Ref": "AWS::Partition"}, ":sqs:", map[string]any{"Ref": "AWS::Region"}, ":", map[string]any{"Ref": "AWS::AccountId"},
		":SqsWorkerExample-Jobs-141FE4F9-", stackID,
	}}}
	has(t, "AWS::SQS::Queue", map[string]any{
		"MessageRetentionPeriod": 14 * 86400,
		"SqsManagedSseEnabled":   true,
		"RedrivePolicy":          assertions.Match_Absent(),
		"QueueName":              map[string]any{"Fn::Join": []any{"", []any{"SqsWorkerExample-Jobs-141FE4F9-", stackID, "-dlq"}}},
		// Only the job queue may use it as its dead-letter queue.
		"RedriveAllowPolicy": map[string]any{"redrivePermission": "byQueue", "sourceQueueArns": []any{queueArn}},
	})
}

// TestRemovalPolicies checks that deleting the stack, or a change that
// replaces them, keeps the queues' messages and the idempotency records.
func TestRemovalPolicies(t *testing.T) {
	for _, typ := range []string{"AWS::SQS::Queue", "AWS::DynamoDB::Table"} {
		must(t, typ+" retained", func() {
			template.AllResources(jsii.String(typ), map[string]any{"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"})
		})
	}
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

// metric is an alarm's MetricStat query.
func metric(id, ns, name, stat string) any {
	return assertions.Match_ObjectLike(&map[string]any{
		"Id": id, "ReturnData": false,
		"MetricStat": map[string]any{
			"Metric": assertions.Match_ObjectLike(&map[string]any{"Namespace": ns, "MetricName": name}),
			"Period": 60, "Stat": stat,
		},
	})
}

func expression(expr string) any {
	return assertions.Match_ObjectLike(&map[string]any{"Expression": expr, "ReturnData": true})
}

// TestAlarms checks every alarm of the stack: what it watches, when it
// fires, how it treats missing data, and that it notifies the queue's
// alarm topic (ALARM and OK), except the scale-from-zero alarm, whose
// action is the step scaling policy.
func TestAlarms(t *testing.T) {
	count(t, "AWS::CloudWatch::Alarm", 11)
	topic := []any{ref("JobsAlarmTopic")}
	notifying := func(p map[string]any) map[string]any {
		p["AlarmActions"], p["OKActions"] = topic, topic
		p["TreatMissingData"] = "notBreaching"
		return p
	}
	for prefix, want := range map[string]map[string]any{
		"JobsDeadLetterAlarm": notifying(map[string]any{
			"Metrics": []any{
				expression("MAX([DIFF(FILL(FILL(visible, REPEAT), 0) + FILL(FILL(inFlight, REPEAT), 0)), sent])"),
				metric("inFlight", "AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "Maximum"),
				metric("sent", "AWS/SQS", "NumberOfMessagesSent", "Sum"),
				metric("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum"),
			},
			"Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 15, "DatapointsToAlarm": 1,
		}),
		"JobsOldestMessageAgeAlarm": notifying(map[string]any{
			"Namespace": "AWS/SQS", "MetricName": "ApproximateAgeOfOldestMessage", "Statistic": "Maximum", "Period": 60,
			"Threshold": 600, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1, // the 10-minute budget
		}),
		"JobsDepthAlarm": notifying(map[string]any{
			"Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible", "Statistic": "Maximum",
			"Threshold": 1000, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 5,
		}),
		"JobsBreakerOpenAlarm": notifying(map[string]any{
			"Metrics": []any{
				expression("FILL(state, REPEAT)"),
				map[string]any{"Id": "state", "ReturnData": false, "MetricStat": map[string]any{
					"Metric": map[string]any{"Namespace": "sqsworker", "MetricName": "breaker_state",
						"Dimensions": []any{map[string]any{"Name": "queue", "Value": getAtt("JobsQueue", "QueueName")}}},
					"Period": 60, "Stat": "Maximum",
				}},
			},
			"Threshold": 1, "ComparisonOperator": "GreaterThanOrEqualToThreshold", "EvaluationPeriods": 5, "DatapointsToAlarm": 5,
		}),
		"ConsumerErrorAlarm": notifying(map[string]any{
			"Namespace": "AWS/Lambda", "MetricName": "Errors", "Statistic": "Sum", "Period": 300,
			"Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1,
		}),
		"ConsumerThrottleAlarm": notifying(map[string]any{
			"Namespace": "AWS/Lambda", "MetricName": "Throttles", "Statistic": "Sum", "Period": 300,
			"Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1,
		}),
		"PollerTaskShortfallAlarm": notifying(map[string]any{
			"Metrics": []any{
				expression("desired - FILL(running, 0)"),
				metric("desired", "ECS/ContainerInsights", "DesiredTaskCount", "Minimum"),
				metric("running", "ECS/ContainerInsights", "RunningTaskCount", "Maximum"),
			},
			"Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 10,
		}),
		"PollerCpuAlarm": notifying(map[string]any{
			"Namespace": "AWS/ECS", "MetricName": "CPUUtilization", "Statistic": "Average", "Period": 60,
			"Threshold": 80, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 5,
		}),
		// The nightly schedule has no dead-letter queue: a dropped
		// occurrence is a lost job.
		"NightlyDroppedAlarm": notifying(map[string]any{
			"Namespace": "AWS/Scheduler", "MetricName": "InvocationDroppedCount", "Statistic": "Sum", "Period": 60,
			"Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1,
		}),
		"PollerMemoryAlarm": notifying(map[string]any{
			"Namespace": "AWS/ECS", "MetricName": "MemoryUtilization", "Statistic": "Average", "Period": 60,
			"Threshold": 80, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 5,
		}),
		"PollerScaleFromZeroAlarm": {
			"Metrics": []any{
				expression("IF(FILL(desired, 0) == 0, visible + inflight, 0)"),
				metric("desired", "ECS/ContainerInsights", "DesiredTaskCount", "Maximum"),
				metric("inflight", "AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "Maximum"),
				metric("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum"),
			},
			"Threshold": 0, "ComparisonOperator": "GreaterThanThreshold", "EvaluationPeriods": 1,
			"TreatMissingData": "notBreaching",
			"AlarmActions":     []any{ref("PollerScaleFromZero")},
			"OKActions":        assertions.Match_Absent(),
		},
	} {
		id, _ := one(t, "AWS::CloudWatch::Alarm", prefix)
		must(t, id, func() {
			template.HasResource(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{"Properties": assertions.Match_ObjectLike(&want)})
		})
	}
}

// TestAlarmTopic checks the topic the queue created for the alarms: KMS
// encrypted, TLS only, and usable by CloudWatch alarms of the stack's
// account and region only.
func TestAlarmTopic(t *testing.T) {
	count(t, "AWS::SNS::Topic", 1)
	has(t, "AWS::SNS::Topic", map[string]any{"KmsMasterKeyId": getAtt("JobsAlarmTopicKey", "Arn")})
	arnLike := map[string]any{"aws:SourceArn": map[string]any{"Fn::Join": []any{"", []any{
		"arn:", map[string]any{"Ref": "AWS::Partition"}, ":cloudwatch:", map[string]any{"Ref": "AWS::Region"}, ":",
		map[string]any{"Ref": "AWS::AccountId"}, ":alarm:*",
	}}}}
	conditions := map[string]any{"StringEquals": map[string]any{"aws:SourceAccount": map[string]any{"Ref": "AWS::AccountId"}}, "ArnLike": arnLike}
	has(t, "AWS::KMS::Key", map[string]any{
		"EnableKeyRotation": true,
		"KeyPolicy": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{map[string]any{
			"Sid": "CloudWatchAlarmsOfThisAccountAndRegion", "Effect": "Allow",
			"Principal": map[string]any{"Service": "cloudwatch.amazonaws.com"},
			"Action":    []any{"kms:Decrypt", "kms:GenerateDataKey*"}, "Resource": "*", "Condition": conditions,
		}})},
	})
	has(t, "AWS::SNS::TopicPolicy", map[string]any{
		"PolicyDocument": map[string]any{"Statement": []any{
			assertions.Match_ObjectLike(&map[string]any{"Effect": "Deny", "Action": "sns:Publish",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}}}),
			map[string]any{"Sid": "CloudWatchAlarmsOfThisAccountAndRegion", "Effect": "Allow",
				"Principal": map[string]any{"Service": "cloudwatch.amazonaws.com"},
				"Action":    "sns:Publish", "Resource": ref("JobsAlarmTopic"), "Condition": conditions},
		}, "Version": "2012-10-17"},
	})
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
		"Role":          getAtt("ConsumerRole", "Arn"),
		"Environment": map[string]any{"Variables": map[string]any{
			"IDEMPOTENCY_TABLE":           ref("Idempotency"),
			"SQSWORKER_BATCHING_WINDOW":   "1s",
			"SQSWORKER_METRICS_NAMESPACE": "sqsworker",
		}},
	})
	has(t, "AWS::Lambda::EventSourceMapping", map[string]any{
		"BatchSize":                      10,
		"MaximumBatchingWindowInSeconds": 1,
		"ScalingConfig":                  map[string]any{"MaximumConcurrency": 10},
		"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
		"EventSourceArn":                 getAtt("JobsQueue", "Arn"),
		"FilterCriteria":                 assertions.Match_Absent(),
	})
}

// statements returns the statements of the IAM policy of role.
func statements(t *testing.T, policyPrefix string) []any {
	t.Helper()
	_, p := one(t, "AWS::IAM::Policy", policyPrefix)
	doc, _ := p.Properties["PolicyDocument"].(map[string]any)
	st, _ := doc["Statement"].([]any)
	return st
}

// sameJSON compares got with want as JSON values.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	var gv, wv any
	_ = json.Unmarshal(g, &gv)
	_ = json.Unmarshal(w, &wv)
	if !reflect.DeepEqual(gv, wv) {
		t.Errorf("%s:\n got  %s\n want %s", what, g, w)
	}
}

func getAttJSON(id, attr string) map[string]any {
	return map[string]any{"Fn::GetAtt": []any{id, attr}}
}

// logical is the logical id of the only resource of typ starting with
// prefix.
func logical(t *testing.T, typ, prefix string) string {
	id, _ := one(t, typ, prefix)
	return id
}

var (
	// The runtimes consume their queue and send waiting copies of delayed
	// jobs back to it.
	consumeActions = []any{"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:SendMessage"}
	sendActions    = []any{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}
	// The poller's task also lists its queue's dead-letter sources:
	// `sqsworker run` refuses a dead-letter queue given by mistake.
	pollActions = []any{"sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ListDeadLetterSourceQueues", "sqs:ReceiveMessage", "sqs:SendMessage"}
	// The idempotency store's actions, exactly.
	storeActions = []any{"dynamodb:DeleteItem", "dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}
)

// TestLambdaConsumerPermissions checks the function's role statement by
// statement: its own log group, the queue, the dead-letter queue, the
// idempotency table; no managed policy.
func TestLambdaConsumerPermissions(t *testing.T) {
	queue := logical(t, "AWS::SQS::Queue", "JobsQueue")
	dlq := logical(t, "AWS::SQS::Queue", "JobsDeadLetterQueue")
	table := logical(t, "AWS::DynamoDB::Table", "Idempotency")
	logs := logical(t, "AWS::Logs::LogGroup", "ConsumerLogs")
	sameJSON(t, "the consumer's policy", statements(t, "ConsumerRoleDefaultPolicy"), []any{
		map[string]any{"Action": []any{"logs:CreateLogStream", "logs:PutLogEvents"}, "Effect": "Allow", "Resource": getAttJSON(logs, "Arn")},
		map[string]any{"Action": consumeActions, "Effect": "Allow", "Resource": getAttJSON(queue, "Arn")},
		map[string]any{"Action": sendActions, "Effect": "Allow", "Resource": getAttJSON(dlq, "Arn")},
		map[string]any{"Action": storeActions, "Effect": "Allow", "Resource": getAttJSON(table, "Arn")},
	})
	_, role := one(t, "AWS::IAM::Role", "ConsumerRole")
	if mp, ok := role.Properties["ManagedPolicyArns"]; ok {
		t.Errorf("the consumer's role has managed policies %v (AWSLambdaBasicExecutionRole writes to every log group)", mp)
	}
}

func TestPollerServiceNoDesiredCount(t *testing.T) {
	count(t, "AWS::ECS::Service", 1)
	has(t, "AWS::ECS::Service", map[string]any{
		"LaunchType": "FARGATE",
		// Absent, so that no deployment resets the scaled task count.
		"DesiredCount":         assertions.Match_Absent(),
		"PropagateTags":        "SERVICE",
		"EnableECSManagedTags": true,
		"DeploymentConfiguration": map[string]any{
			"DeploymentCircuitBreaker": map[string]any{"Enable": true, "Rollback": true},
			"MaximumPercent":           200, "MinimumHealthyPercent": 100,
		},
		"NetworkConfiguration": map[string]any{"AwsvpcConfiguration": assertions.Match_ObjectLike(&map[string]any{"AssignPublicIp": "DISABLED"})},
	})
}

// TestSharedNetwork checks the stack's one network: a VPC with one NAT
// gateway, free gateway endpoints for S3 and DynamoDB, and a cluster with
// Container Insights.
func TestSharedNetwork(t *testing.T) {
	count(t, "AWS::EC2::VPC", 1)
	count(t, "AWS::EC2::NatGateway", 1)
	count(t, "AWS::ECS::Cluster", 1)
	has(t, "AWS::ECS::Cluster", map[string]any{
		"ClusterSettings": []any{map[string]any{"Name": "containerInsights", "Value": "enabled"}},
	})
	count(t, "AWS::EC2::VPCEndpoint", 2)
	for _, svc := range []string{"s3", "dynamodb"} {
		has(t, "AWS::EC2::VPCEndpoint", map[string]any{
			"VpcEndpointType": "Gateway",
			"ServiceName":     map[string]any{"Fn::Join": []any{"", []any{"com.amazonaws.", map[string]any{"Ref": "AWS::Region"}, "." + svc}}},
		})
	}
}

func TestPollerServiceTaskDefinition(t *testing.T) {
	queue := ref("JobsQueue")
	env := assertions.Match_ArrayWith(&[]any{
		map[string]any{"Name": "DEAD_LETTER_QUEUE_URL", "Value": ref("JobsDeadLetterQueue")},
		map[string]any{"Name": "IDEMPOTENCY_TABLE", "Value": ref("Idempotency")},
		map[string]any{"Name": "QUEUE_URL", "Value": queue},
	})
	has(t, "AWS::ECS::TaskDefinition", map[string]any{
		"RequiresCompatibilities": []any{"FARGATE"},
		"Cpu":                     "256",
		"Memory":                  "512",
		"RuntimePlatform":         map[string]any{"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"},
		"ContainerDefinitions": []any{
			assertions.Match_ObjectLike(&map[string]any{
				"Name":        "Worker",
				"StopTimeout": 30, // >= the worker's 25s ShutdownTimeout + 5s
				"Command": []any{"run", queue, "--http", "http://127.0.0.1:8080/jobs", "--concurrency", "10",
					"--shutdown-timeout", "25s", "--metrics", "emf", "--metrics-namespace", "sqsworker", "--handler-name", "handler", "--scale-in-protection"},
				"Environment": env,
				// The worker waits for the handler to be healthy.
				"DependsOn": []any{map[string]any{"ContainerName": "Handler", "Condition": "HEALTHY"}},
				// An init process reaps exec-mode commands' orphans.
				"LinuxParameters":        assertions.Match_ObjectLike(&map[string]any{"InitProcessEnabled": true}),
				"ReadonlyRootFilesystem": true,
				"LogConfiguration": assertions.Match_ObjectLike(&map[string]any{"LogDriver": "awslogs",
					"Options": assertions.Match_ObjectLike(&map[string]any{"awslogs-stream-prefix": "worker"})}),
				"Image": map[string]any{"Fn::Sub": assertions.Match_StringLikeRegexp(jsii.String("container-assets"))},
			}),
			assertions.Match_ObjectLike(&map[string]any{
				"Name":      "Handler",
				"Essential": true,
				"HealthCheck": assertions.Match_ObjectLike(&map[string]any{
					"Command": []any{"CMD", "/handler", "-healthcheck"}, "Interval": 10, "StartPeriod": 10,
				}),
				"Environment":            env,
				"ReadonlyRootFilesystem": true,
				"PortMappings":           assertions.Match_Absent(), // localhost only
				"LogConfiguration": assertions.Match_ObjectLike(&map[string]any{"LogDriver": "awslogs",
					"Options": assertions.Match_ObjectLike(&map[string]any{"awslogs-stream-prefix": "handler"})}),
				"Image": map[string]any{"Fn::Sub": assertions.Match_StringLikeRegexp(jsii.String("container-assets"))},
			}),
		},
	})
}

func TestPollerServiceScaling(t *testing.T) {
	has(t, "AWS::ApplicationAutoScaling::ScalableTarget", map[string]any{
		"MinCapacity": 0, "MaxCapacity": 4,
		"ScalableDimension": "ecs:service:DesiredCount", "ServiceNamespace": "ecs",
		// ECS's service-linked role: no role of the construct's own.
		"RoleARN": map[string]any{"Fn::Join": []any{"", []any{"arn:", map[string]any{"Ref": "AWS::Partition"}, ":iam::", map[string]any{"Ref": "AWS::AccountId"},
			":role/aws-service-role/ecs.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_ECSService"}}},
	})
	stat := func(id, ns, name, stat string) map[string]any {
		return map[string]any{
			"Id": id, "ReturnData": false,
			"MetricStat": map[string]any{"Stat": stat, "Metric": assertions.Match_ObjectLike(&map[string]any{"Namespace": ns, "MetricName": name})},
		}
	}
	has(t, "AWS::ApplicationAutoScaling::ScalingPolicy", map[string]any{
		"PolicyType": "TargetTrackingScaling",
		"TargetTrackingScalingPolicyConfiguration": map[string]any{
			// 600 s budget / 2 / 2 s per job × 10 at a time.
			"TargetValue":     1500,
			"ScaleInCooldown": 300, "ScaleOutCooldown": 60,
			"CustomizedMetricSpecification": map[string]any{"Metrics": []any{
				stat("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "Sum"),
				stat("running", "ECS/ContainerInsights", "RunningTaskCount", "Average"),
				assertions.Match_ObjectLike(&map[string]any{"Id": "backlogPerTask", "Expression": "visible / running", "ReturnData": true}),
			}},
		},
	})
	// Scale from zero: one more task (never an exact count) when the
	// alarm fires.
	has(t, "AWS::ApplicationAutoScaling::ScalingPolicy", map[string]any{
		"PolicyType":      "StepScaling",
		"ScalingTargetId": ref("PollerScalableTarget"),
		"StepScalingPolicyConfiguration": map[string]any{
			"AdjustmentType": "ChangeInCapacity", "Cooldown": 180, "MetricAggregationType": "Maximum",
			"StepAdjustments": []any{map[string]any{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}},
		},
	})
	count(t, "AWS::ApplicationAutoScaling::ScalingPolicy", 2)
}

// TestNoUnusedRoles checks that no role is made for Application Auto
// Scaling (ECS uses its service-linked role) and lists the stack's roles.
func TestNoUnusedRoles(t *testing.T) {
	var got []string
	for id, r := range resources {
		if r.Type != "AWS::IAM::Role" {
			continue
		}
		b, _ := json.Marshal(r.Properties["AssumeRolePolicyDocument"])
		if bytes.Contains(b, []byte("application-autoscaling")) {
			t.Errorf("the role %s is assumed by Application Auto Scaling, which uses ECS's service-linked role", id)
		}
		got = append(got, strings.TrimRight(id, "0123456789ABCDEF"))
	}
	sort.Strings(got)
	want := []string{"ConsumerRole", "CustomVpcRestrictDefaultSGCustomResourceProviderRole", "NightlyRole", "PollerTaskDefinitionExecutionRole", "PollerTaskDefinitionTaskRole", "SqsWorkerNetworkVpcFlowLogsIAMRole"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("roles %v, want %v", got, want)
	}
}

// TestPollerServicePermissions checks the task role statement by
// statement.
func TestPollerServicePermissions(t *testing.T) {
	queue := logical(t, "AWS::SQS::Queue", "JobsQueue")
	dlq := logical(t, "AWS::SQS::Queue", "JobsDeadLetterQueue")
	table := logical(t, "AWS::DynamoDB::Table", "Idempotency")
	sameJSON(t, "the task role's policy", statements(t, "PollerTaskDefinitionTaskRoleDefaultPolicy"), []any{
		map[string]any{"Action": pollActions, "Effect": "Allow", "Resource": getAttJSON(queue, "Arn")},
		map[string]any{"Action": sendActions, "Effect": "Allow", "Resource": getAttJSON(dlq, "Arn")},
		map[string]any{"Action": storeActions, "Effect": "Allow", "Resource": getAttJSON(table, "Arn")},
	})
}

// TestSchedule checks the nightly schedule: its envelope, and a role that
// may send to the job queue only.
func TestSchedule(t *testing.T) {
	queue := logical(t, "AWS::SQS::Queue", "JobsQueue")
	has(t, "AWS::Scheduler::Schedule", map[string]any{
		"ScheduleExpression": "cron(0 3 * * ? *)", "ScheduleExpressionTimezone": "Europe/Paris",
		"FlexibleTimeWindow": map[string]any{"Mode": "OFF"},
		"Target": assertions.Match_ObjectLike(&map[string]any{
			"Arn":   getAtt("JobsQueue", "Arn"),
			"Input": `{"sqsworker.schedule":{"name":"nightly-report","scheduledTime":"<aws.scheduler.scheduled-time>"},"payload":{"report":"daily-totals"}}`,
		}),
	})
	sameJSON(t, "the schedule role's policy", statements(t, "NightlyRoleDefaultPolicy"), []any{
		map[string]any{"Action": []any{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}, "Effect": "Allow", "Resource": getAttJSON(queue, "Arn")},
	})
}

func TestDashboard(t *testing.T) {
	count(t, "AWS::CloudWatch::Dashboard", 1)
	b, _ := json.Marshal(template.FindResources(jsii.String("AWS::CloudWatch::Dashboard"), nil))
	body := string(b)
	for _, want := range []string{
		"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "NumberOfMessagesReceived", "NumberOfMessagesDeleted",
		`SEARCH('{sqsworker,queue,handler,error_class} MetricName=\\\"messages_failed\\\"`,
		"handler_duration", `\"stat\":\"p50\"`, `\"stat\":\"p99\"`,
		`\"AWS/Lambda\",\"Errors\"`, `\"AWS/Lambda\",\"Throttles\"`,
		"JobsDeadLetterQueue",
		// The circuit breaker.
		`\"sqsworker\",\"breaker_state\"`, `\"sqsworker\",\"breaker_opens\"`, `\"sqsworker\",\"breaker_probes\"`,
		// The poller: backlog per task against its target, tasks, CPU, memory.
		`\"expression\":\"visible / running\"`, `{\"label\":\"scaling target\",\"value\":1500,`,
		`\"ECS/ContainerInsights\",\"RunningTaskCount\"`, `\"ECS/ContainerInsights\",\"DesiredTaskCount\"`,
		`\"AWS/ECS\",\"CPUUtilization\"`, `\"AWS/ECS\",\"MemoryUtilization\"`,
		// The latency budget on the age graph.
		`{\"label\":\"latency budget\",\"value\":600,`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the dashboard lacks %s", want)
		}
	}
}

func TestOperatorPolicy(t *testing.T) {
	dlq := getAtt("JobsDeadLetterQueue", "Arn")
	has(t, "AWS::IAM::ManagedPolicy", map[string]any{
		"PolicyDocument": map[string]any{"Statement": []any{
			// Actions sorted by @aws-cdk/aws-iam:minimizePolicies.
			map[string]any{"Sid": "InspectAndRedriveDeadLetterQueue", "Effect": "Allow", "Resource": dlq, "Action": []any{
				"sqs:CancelMessageMoveTask", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
				"sqs:ListDeadLetterSourceQueues", "sqs:ListMessageMoveTasks", "sqs:ReceiveMessage", "sqs:StartMessageMoveTask",
			}},
			map[string]any{"Sid": "ReplayToSourceQueue", "Effect": "Allow",
				"Resource": getAtt("JobsQueue", "Arn"),
				"Action":   []any{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ListDeadLetterSourceQueues", "sqs:SendMessage"}},
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

// TestNagSuppressionsJustified checks that every cdk-nag suppression in
// the template gives a reason of some substance.
func TestNagSuppressionsJustified(t *testing.T) {
	n := 0
	for id, r := range resources {
		nag, _ := r.Metadata["cdk_nag"].(map[string]any)
		rules, _ := nag["rules_to_suppress"].([]any)
		for _, rule := range rules {
			s, _ := rule.(map[string]any)
			n++
			if reason, _ := s["reason"].(string); len(strings.Fields(reason)) < 8 {
				t.Errorf("%s: the suppression of %v has no real reason: %q", id, s["id"], reason)
			}
		}
	}
	if n == 0 {
		t.Error("no suppression found: the metadata layout changed?")
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

// TestExampleHandlerModule vets and tests the example handler, a module of
// its own that `go test ./...` in infra/ does not reach.
func TestExampleHandlerModule(t *testing.T) {
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join("..", exampleapp.DefaultHandlerDir)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), cmd.Dir, err, out)
		}
	}
}
