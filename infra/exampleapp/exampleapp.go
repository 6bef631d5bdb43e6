// Package exampleapp is the example job system that `make synth` and the
// tests synthesize: a JobQueue with alarms to an encrypted SNS topic, an
// IdempotencyTable, and a LambdaConsumer of the queue, checked by cdk-nag's
// AwsSolutions rules.
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
}

// Stack is the example stack and its parts, for tests.
type Stack struct {
	Stack      awscdk.Stack
	AlarmTopic awssns.Topic
	Jobs       *sqsinfra.JobQueue
	Table      *sqsinfra.IdempotencyTable
	Consumer   *sqsinfra.LambdaConsumer
}

// New defines the example stack in app. The stack is environment-agnostic,
// so that it synthesizes without AWS credentials.
func New(scope constructs.Construct, props *Props) *Stack {
	if props == nil {
		props = &Props{}
	}
	s := &Stack{Stack: awscdk.NewStack(scope, jsii.String(StackName), &awscdk.StackProps{
		Description:        jsii.String("sqsworker example job system: queue, dead-letter queue, alarms, idempotency table, Lambda consumer"),
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

	cdknag.NagSuppressions_AddResourceSuppressions(s.Consumer.Function.Role(), &[]*cdknag.NagPackSuppression{{
		Id: jsii.String("AwsSolutions-IAM4"),
		Reason: jsii.String("AWSLambdaBasicExecutionRole only lets the function write its own CloudWatch Logs; " +
			"every other permission is granted inline on the queue, dead-letter queue and table."),
		AppliesTo: &[]any{"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"},
	}}, jsii.Bool(true))
	return s
}

// Check adds cdk-nag's AwsSolutions checks to every stack of app: their
// errors are error annotations, which make `cdk synth` fail.
func Check(app awscdk.App) {
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{Verbose: jsii.Bool(true)}), nil)
}
