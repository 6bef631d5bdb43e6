// Package exampleapp is the example job system that `make synth` and the
// tests synthesize, deployable as is: a JobQueue with its alarms on an
// encrypted SNS topic it creates, an IdempotencyTable, a LambdaConsumer and
// a PollerService of the queue (the sqsworker image with the example
// handler, infra/examplehandler, as a second container, scaled to zero when
// idle), a nightly Schedule sending a job to the queue, a Dashboard and an
// OperatorPolicy, checked by cdk-nag's AwsSolutions rules.
package exampleapp

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/sqsworker/sqsworker/infra/sqsinfra"
)

// StackName is the example stack's construct id and CloudFormation name.
const StackName = "SqsWorkerExample"

// DefaultHandlerDir is the build context of the example handler's image,
// relative to infra/ (where `cdk` runs the app).
const DefaultHandlerDir = "examplehandler"

// Props configures the example stack.
type Props struct {
	// CodeDir is the directory holding the Lambda bootstrap. Default
	// sqsinfra.DefaultCodeDir.
	CodeDir string
	// ImageDir is the Docker build context of the worker image, holding
	// its Dockerfile. Default sqsinfra.DefaultImageDir (the repository
	// root, seen from infra/).
	ImageDir string
	// HandlerDir is the Docker build context of the handler image, holding
	// its Dockerfile. Default DefaultHandlerDir.
	HandlerDir string
}

// Stack is the example stack and its parts, for tests.
type Stack struct {
	// Stack is the CloudFormation stack.
	Stack awscdk.Stack
	// Jobs is the job queue, with its alarms and alarm topic.
	Jobs *sqsinfra.JobQueue
	// Table is the idempotency table.
	Table *sqsinfra.IdempotencyTable
	// Consumer is the Lambda consumer of Jobs.
	Consumer *sqsinfra.LambdaConsumer
	// Poller is the ECS consumer of Jobs, with the example handler.
	Poller *sqsinfra.PollerService
	// Dashboard graphs the job system.
	Dashboard *sqsinfra.Dashboard
	// Operator is the policy for dead-letter inspection and replay.
	Operator *sqsinfra.OperatorPolicy
	// Nightly is the schedule sending a report job to Jobs every night.
	Nightly *sqsinfra.Schedule
}

// New defines the example stack in app. The stack is environment-agnostic,
// so that it synthesizes without AWS credentials.
func New(scope constructs.Construct, props *Props) *Stack {
	if props == nil {
		props = &Props{}
	}
	s := &Stack{Stack: awscdk.NewStack(scope, jsii.String(StackName), &awscdk.StackProps{
		Description:        jsii.String("sqsworker example job system: queue, dead-letter queue, alarms, idempotency table, Lambda consumer, ECS poller with its handler, nightly schedule, dashboard, operator policy"),
		AnalyticsReporting: jsii.Bool(false),
	})}

	// The queue's visibility timeout is left to the Lambda consumer (six
	// times its 30 s timeout plus its 1 s batching window); its removal
	// policy, like the table's, keeps jobs and records when the stack is
	// deleted.
	s.Jobs = sqsinfra.NewJobQueue(s.Stack, "Jobs", &sqsinfra.JobQueueProps{
		LatencyBudget: awscdk.Duration_Minutes(jsii.Number(10)),
		Alarms:        sqsinfra.QueueAlarmProps{CreateTopic: true},
	})
	s.Table = sqsinfra.NewIdempotencyTable(s.Stack, "Idempotency", nil)
	var codeDir *string
	if props.CodeDir != "" {
		codeDir = jsii.String(props.CodeDir)
	}
	s.Consumer = sqsinfra.NewLambdaConsumer(s.Stack, "Consumer", &sqsinfra.LambdaConsumerProps{
		Queue:             s.Jobs,
		Table:             s.Table,
		CodeDir:           codeDir,
		Timeout:           awscdk.Duration_Seconds(jsii.Number(30)),
		BatchSize:         jsii.Number(10),
		MaxBatchingWindow: awscdk.Duration_Seconds(jsii.Number(1)),
		MaxConcurrency:    jsii.Number(10),
	})

	var imageDir *string
	if props.ImageDir != "" {
		imageDir = jsii.String(props.ImageDir)
	}
	handlerDir := DefaultHandlerDir
	if props.HandlerDir != "" {
		handlerDir = props.HandlerDir
	}
	// The same queue also feeds an ECS poller, to show both consumers; a
	// real system would pick one per queue.
	s.Poller = sqsinfra.NewPollerService(s.Stack, "Poller", &sqsinfra.PollerServiceProps{
		Queue:    s.Jobs,
		Table:    s.Table,
		ImageDir: imageDir,
		Handler: &sqsinfra.HandlerContainer{
			Image: awsecs.ContainerImage_FromAsset(jsii.String(handlerDir), &awsecs.AssetImageProps{
				Platform: awsecrassets.Platform_LINUX_ARM64(),
			}),
			HealthCheck: &awsecs.HealthCheck{
				Command:     jsii.Strings("CMD", "/handler", "-healthcheck"),
				Interval:    awscdk.Duration_Seconds(jsii.Number(10)),
				StartPeriod: awscdk.Duration_Seconds(jsii.Number(10)),
			},
		},
		// The example jobs take about 2 s: with the 10-minute budget and
		// 10 jobs at a time, the target is 600 / 2 / 2 × 10 = 1500
		// messages per task.
		JobDuration: awscdk.Duration_Seconds(jsii.Number(2)),
		Concurrency: jsii.Number(10),
		MinTasks:    jsii.Number(0),
		MaxTasks:    jsii.Number(4),
	})
	s.Dashboard = sqsinfra.NewDashboard(s.Stack, "Dashboard", &sqsinfra.DashboardProps{
		Queue:    s.Jobs,
		Consumer: s.Consumer,
		Poller:   s.Poller,
	})
	s.Operator = sqsinfra.NewOperatorPolicy(s.Stack, "Operator", &sqsinfra.OperatorPolicyProps{Queue: s.Jobs})
	// A job every night at 3:00 Paris time; schedule.Key makes each
	// night's job run once, however often it is sent.
	s.Nightly = sqsinfra.NewSchedule(s.Stack, "Nightly", &sqsinfra.ScheduleProps{
		Queue:      s.Jobs,
		Name:       "nightly-report",
		Expression: "cron(0 3 * * ? *)",
		TimeZone:   "Europe/Paris",
		Payload:    map[string]string{"report": "daily-totals"},
	})

	cdknag.NagSuppressions_AddResourceSuppressions(s.Poller.TaskDefinition, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-ECS2"),
		Reason: jsii.String("The environment holds only resource identifiers (queue URLs, table name) that CloudFormation " +
			"resolves at deploy time; no secret is passed in it."),
	}}, jsii.Bool(false))
	cdknag.NagSuppressions_AddResourceSuppressions(s.Poller.TaskDefinition.ExecutionRole(), &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("ecr:GetAuthorizationToken, which the execution role needs to pull the worker and handler images, " +
			"supports no resource-level permissions: its resource must be *. Pulling is limited to the images' repository."),
		AppliesTo: &[]any{"Resource::*"},
	}}, jsii.Bool(true))
	return s
}

// Check adds cdk-nag's AwsSolutions checks to every stack of app: their
// errors are error annotations, which make `cdk synth` fail.
func Check(app awscdk.App) {
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
}
