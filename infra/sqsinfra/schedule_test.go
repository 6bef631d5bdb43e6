package sqsinfra_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/sqsworker/sqsworker/infra/sqsinfra"
)

// wantInput is the body template of the schedule "nightly-report" with the
// payload {"report":"sales"}; the Go package schedule's tests parse the same
// envelope (as EventBridge Scheduler fills it in).
const wantInput = `{"sqsworker.schedule":{"name":"nightly-report","scheduledTime":"<aws.scheduler.scheduled-time>"},"payload":{"report":"sales"}}`

func TestScheduleInput(t *testing.T) {
	got, err := sqsinfra.ScheduleInput("nightly-report", map[string]string{"report": "sales"})
	if err != nil || got != wantInput {
		t.Fatalf("ScheduleInput = %s, %v; want %s", got, err, wantInput)
	}
	got, _ = sqsinfra.ScheduleInput("n", nil)
	if want := `{"sqsworker.schedule":{"name":"n","scheduledTime":"<aws.scheduler.scheduled-time>"},"payload":null}`; got != want {
		t.Errorf("nil payload: %s", got)
	}
	if _, err := sqsinfra.ScheduleInput("n", func() {}); err == nil {
		t.Error("a function marshalled")
	}
}

// TestSchedule checks the schedule, its target on an encrypted queue, its
// role and its dead-letter queue.
func TestSchedule(t *testing.T) {
	s := newStack()
	key := awskms.NewKey(s, jsii.String("Key"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
	q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{EncryptionKey: key, Alarms: sqsinfra.QueueAlarmProps{CreateTopic: true}})
	dlq := awssqs.NewQueue(s, jsii.String("SchedulerDLQ"), &awssqs.QueueProps{EnforceSSL: jsii.Bool(true)})
	c := sqsinfra.NewSchedule(s, "Nightly", &sqsinfra.ScheduleProps{
		Queue: q, Name: "nightly-report", Expression: "cron(0 3 * * ? *)", TimeZone: "Europe/Paris",
		Payload: map[string]string{"report": "sales"}, RetryAttempts: jsii.Number(10),
		MaxEventAge: awscdk.Duration_Hours(jsii.Number(2)), DeadLetterQueue: dlq,
	})
	if c.Input != wantInput {
		t.Errorf("Input %s", c.Input)
	}
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "schedule", func() {
		tpl.HasResourceProperties(jsii.String("AWS::Scheduler::Schedule"), map[string]any{
			"ScheduleExpression":         "cron(0 3 * * ? *)",
			"ScheduleExpressionTimezone": "Europe/Paris",
			"FlexibleTimeWindow":         map[string]any{"Mode": "OFF"},
			"State":                      "ENABLED",
			"Target": map[string]any{
				"Arn":              map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^QQueue")), "Arn"}},
				"RoleArn":          map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^NightlyRole")), "Arn"}},
				"Input":            wantInput,
				"RetryPolicy":      map[string]any{"MaximumRetryAttempts": 10, "MaximumEventAgeInSeconds": 7200},
				"DeadLetterConfig": map[string]any{"Arn": map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^SchedulerDLQ")), "Arn"}}},
			},
		})
	})
	check(t, "role for the scheduler of this account", func() {
		tpl.HasResourceProperties(jsii.String("AWS::IAM::Role"), map[string]any{
			"AssumeRolePolicyDocument": map[string]any{"Statement": []any{map[string]any{
				"Action": "sts:AssumeRole", "Effect": "Allow",
				"Principal": map[string]any{"Service": "scheduler.amazonaws.com"},
				"Condition": map[string]any{"StringEquals": map[string]any{"aws:SourceAccount": map[string]any{"Ref": "AWS::AccountId"}}},
			}}, "Version": "2012-10-17"},
		})
	})
	got := actionsOn(statementsOf(t, tpl, "NightlyRoleDefaultPolicy"))
	var sendQueue, sendDLQ, kms bool
	for r, actions := range got {
		a := strings.Join(actions, ",")
		switch {
		case strings.HasPrefix(r, `{"Fn::GetAtt":["QQueue`):
			sendQueue = a == "sqs:GetQueueAttributes,sqs:GetQueueUrl,sqs:SendMessage"
		case strings.HasPrefix(r, `{"Fn::GetAtt":["SchedulerDLQ`):
			sendDLQ = strings.Contains(a, "sqs:SendMessage")
		case strings.HasPrefix(r, `{"Fn::GetAtt":["Key`):
			kms = strings.Contains(a, "kms:GenerateDataKey") && strings.Contains(a, "kms:Decrypt")
		default:
			t.Errorf("unexpected actions on %s: %v", r, actions)
		}
	}
	if !sendQueue || !sendDLQ || !kms {
		t.Errorf("send to queue %t, to DLQ %t, KMS %t: %v", sendQueue, sendDLQ, kms, got)
	}
	check(t, "DLQ alarm to the queue's topic", func() {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"MetricName":   "NumberOfMessagesSent",
			"Dimensions":   []any{map[string]any{"Name": "QueueName", "Value": map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^SchedulerDLQ")), "QueueName"}}}},
			"AlarmActions": []any{map[string]any{"Ref": assertions.Match_StringLikeRegexp(jsii.String("^QAlarmTopic"))}},
		})
	})
}

// TestScheduleFifoAndOptions checks a FIFO target's message group, a
// flexible window, a disabled schedule and the defaults.
func TestScheduleFifoAndOptions(t *testing.T) {
	s := newStack()
	q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Fifo: true, ContentBasedDeduplication: true})
	sqsinfra.NewSchedule(s, "Every5", &sqsinfra.ScheduleProps{Queue: q, Name: "sync", Expression: "rate(5 minutes)",
		FlexibleWindow: awscdk.Duration_Minutes(jsii.Number(2)), Disabled: true})
	tpl := assertions.Template_FromStack(s, nil)
	var sched map[string]any
	for _, r := range resourcesOf(tpl, "AWS::Scheduler::Schedule") {
		sched = props(r)
	}
	b, _ := json.Marshal(sched)
	for _, want := range []string{
		`"FlexibleTimeWindow":{"MaximumWindowInMinutes":2,"Mode":"FLEXIBLE"}`, `"State":"DISABLED"`,
		`"ScheduleExpressionTimezone":"UTC"`, `"SqsParameters":{"MessageGroupId":"sync"}`,
		`"RetryPolicy":{"MaximumEventAgeInSeconds":86400,"MaximumRetryAttempts":185}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("schedule lacks %s: %s", want, b)
		}
	}
	if strings.Contains(string(b), "DeadLetterConfig") {
		t.Error("a dead-letter config without DeadLetterQueue")
	}
	// Without a dead-letter queue, a dropped occurrence is a lost job:
	// an alarm on the schedule group's InvocationDroppedCount tells.
	check(t, "the dropped-occurrences alarm", func() {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"Namespace": "AWS/Scheduler", "MetricName": "InvocationDroppedCount", "Statistic": "Sum",
			"Dimensions": []any{map[string]any{"Name": "ScheduleGroup", "Value": "default"}},
			"Threshold":  0, "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching",
		})
	})
}

func TestScheduleInvalidProps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		props func(s awscdk.Stack) *sqsinfra.ScheduleProps
		want  []string
	}{
		{"no queue", func(s awscdk.Stack) *sqsinfra.ScheduleProps { return &sqsinfra.ScheduleProps{} }, []string{`Schedule "S"`, "Queue is required"}},
		{"everything wrong", func(s awscdk.Stack) *sqsinfra.ScheduleProps {
			return &sqsinfra.ScheduleProps{Queue: sqsinfra.NewJobQueue(s, "Q", nil), Name: "nightly report", Expression: "0 3 * * *",
				TimeZone: "Mars/Olympus", FlexibleWindow: awscdk.Duration_Seconds(jsii.Number(30)), RetryAttempts: jsii.Number(200),
				MaxEventAge: awscdk.Duration_Days(jsii.Number(2)), MessageGroupID: jsii.String("g"), Payload: make(chan int)}
		}, []string{`Name must be 1 to 64 letters, digits, '-', '_' and '.'`, `Expression must be cron(...), rate(...) or at(...)`,
			`TimeZone must be an IANA time zone`, "FlexibleWindow must be whole minutes from 1 to 1440, got 0.5 minutes",
			"RetryAttempts must be a whole number from 0 to 185, got 200", "MaxEventAge must be whole seconds from 1 minute to 24 hours",
			"MessageGroupID is for a FIFO queue only", "Payload: json: unsupported type"}},
		{"FIFO without content deduplication", func(s awscdk.Stack) *sqsinfra.ScheduleProps {
			return &sqsinfra.ScheduleProps{Queue: sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{Fifo: true}), Name: "n", Expression: "rate(1 hour)"}
		}, []string{"without ContentBasedDeduplication", "set JobQueueProps.ContentBasedDeduplication"}},
		{"FIFO dead-letter queue", func(s awscdk.Stack) *sqsinfra.ScheduleProps {
			return &sqsinfra.ScheduleProps{Queue: sqsinfra.NewJobQueue(s, "Q", nil), Name: "n", Expression: "rate(1 hour)",
				DeadLetterQueue: awssqs.NewQueue(s, jsii.String("D"), &awssqs.QueueProps{Fifo: jsii.Bool(true)})}
		}, []string{"DeadLetterQueue must be a standard queue"}},
		{"a context attribute of each send in the payload", func(s awscdk.Stack) *sqsinfra.ScheduleProps {
			return &sqsinfra.ScheduleProps{Queue: sqsinfra.NewJobQueue(s, "Q", nil), Name: "n", Expression: "rate(1 hour)",
				Payload: map[string]string{"run": "<aws.scheduler.execution-id>"}}
		}, []string{"Payload: it contains <aws.scheduler.execution-id>", "dead-letters the second", "<aws.scheduler.scheduled-time>"}},
		{"the attempt number in the payload", func(s awscdk.Stack) *sqsinfra.ScheduleProps {
			return &sqsinfra.ScheduleProps{Queue: sqsinfra.NewJobQueue(s, "Q", nil), Name: "n", Expression: "rate(1 hour)",
				Payload: "try <aws.scheduler.attempt-number>"}
		}, []string{"Payload: it contains <aws.scheduler.attempt-number>"}},
		{"a Name another schedule of the queue has", func(s awscdk.Stack) *sqsinfra.ScheduleProps {
			q := sqsinfra.NewJobQueue(s, "Q", nil)
			sqsinfra.NewSchedule(s, "First", &sqsinfra.ScheduleProps{Queue: q, Name: "nightly-report", Expression: "cron(0 3 * * ? *)"})
			return &sqsinfra.ScheduleProps{Queue: q, Name: "nightly-report", Expression: "cron(0 4 * * ? *)"}
		}, []string{`Name "nightly-report" is that of the schedule`, "First", "give each its own Name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := panics(func() {
				s := newStack()
				sqsinfra.NewSchedule(s, "S", tc.props(s))
			})
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
