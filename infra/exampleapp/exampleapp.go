// Package exampleapp is the example job system that `make synth` and the
// tests synthesize: a JobQueue with alarms to an encrypted SNS topic, an
// IdempotencyTable, a LambdaConsumer and a PollerService of the queue, a
// Dashboard and an OperatorPolicy, checked by cdk-nag's AwsSolutions rules.
package exampleapp

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/sqsworker/sqsworker/infra/sqsinfra"
)

// StackName is the example stack's construct id and CloudFormation name.
const StackName = "SqsWorkerExample"

// Props configures the example stack.
type Props struct {
	// CodeDir is the directory holding the Lambda bootstrap. Default
	// sqsinfra.DefaultCodeDir.
	CodeDir string
	// ImageDir is the Docker build context of the worker image, holding
	// its Dockerfile. Default sqsinfra.DefaultImageDir (the repository
	// root, seen from infra/).
	ImageDir string
}

// Stack is the example stack and its parts, for tests.
type Stack struct {
	Stack      awscdk.Stack
	AlarmTopic awssns.Topic
	Jobs       *sqsinfra.JobQueue
	Table      *sqsinfra.IdempotencyTable
	Consumer   *sqsinfra.LambdaConsumer
	Poller     *sqsinfra.PollerService
	Dashboard  *sqsinfra.Dashboard
	Operator   *sqsinfra.OperatorPolicy
}

// New defines the example stack in app. The stack is environment-agnostic,
// so that it synthesizes without AWS credentials.
func New(scope constructs.Construct, props *Props) *Stack {
	if props == nil {
		props = &Props{}
	}
	s := &Stack{Stack: awscdk.NewStack(scope, jsii.String(StackName), &awscdk.StackProps{
		Description:        jsii.String("sqsworker example job system: queue, dead-letter queue, alarms, idempotency table, Lambda consumer, ECS poller, dashboard, operator policy"),
		AnalyticsReporting: jsii.Bool(false),
	})}

	// CloudWatch alarms can publish to an encrypted topic only with a
	// customer-managed key that lets CloudWatch use it.
	alarmKey := awskms.NewKey(s.Stack, jsii.String("AlarmTopicKey"), &awskms.KeyProps{
		Description:       jsii.String("Encrypts the alarm topic"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     awscdk.RemovalPolicy_DESTROY,
	})
	alarmKey.GrantEncryptDecrypt(awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil))
	s.AlarmTopic = awssns.NewTopic(s.Stack, jsii.String("AlarmTopic"), &awssns.TopicProps{
		MasterKey:  alarmKey,
		EnforceSSL: jsii.Bool(true),
	})

	s.Jobs = sqsinfra.NewJobQueue(s.Stack, "Jobs", &sqsinfra.JobQueueProps{
		// Six times the consumer's 30-second timeout.
		VisibilityTimeout: awscdk.Duration_Minutes(jsii.Number(3)),
		AlarmTopic:        s.AlarmTopic,
	})
	s.Table = sqsinfra.NewIdempotencyTable(s.Stack, "Idempotency", &sqsinfra.IdempotencyTableProps{
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
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
	// The same queue also feeds an ECS poller, to show both consumers; a
	// real system would pick one per queue.
	s.Poller = sqsinfra.NewPollerService(s.Stack, "Poller", &sqsinfra.PollerServiceProps{
		Queue:    s.Jobs,
		Table:    s.Table,
		ImageDir: imageDir,
	})
	s.Dashboard = sqsinfra.NewDashboard(s.Stack, "Dashboard", &sqsinfra.DashboardProps{
		Queue:    s.Jobs,
		Consumer: s.Consumer,
	})
	s.Operator = sqsinfra.NewOperatorPolicy(s.Stack, "Operator", &sqsinfra.OperatorPolicyProps{Queue: s.Jobs})

	cdknag.NagSuppressions_AddResourceSuppressions(s.Consumer.Function.Role(), &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM4"),
		Reason: jsii.String("AWSLambdaBasicExecutionRole only lets the function write its own CloudWatch Logs; " +
			"every other permission is granted inline on the queue, dead-letter queue and table."),
		AppliesTo: &[]any{"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"},
	}}, jsii.Bool(true))
	cdknag.NagSuppressions_AddResourceSuppressions(s.Poller.TaskDefinition, &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-ECS2"),
		Reason: jsii.String("The environment holds only resource identifiers (queue URLs, table name) that CloudFormation " +
			"resolves at deploy time; no secret is passed in it."),
	}}, jsii.Bool(false))
	cdknag.NagSuppressions_AddResourceSuppressions(s.Poller.TaskDefinition.ExecutionRole(), &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM5"),
		Reason: jsii.String("ecr:GetAuthorizationToken, which the execution role needs to pull the worker image, " +
			"supports no resource-level permissions: its resource must be *. Pulling is limited to the image's repository."),
		AppliesTo: &[]any{"Resource::*"},
	}}, jsii.Bool(true))
	return s
}

// Check adds cdk-nag's AwsSolutions checks to every stack of app: their
// errors are error annotations, which make `cdk synth` fail.
func Check(app awscdk.App) {
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
}
