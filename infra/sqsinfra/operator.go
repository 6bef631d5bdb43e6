package sqsinfra

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// OperatorPolicyProps configures an OperatorPolicy. Queue is required.
type OperatorPolicyProps struct {
	// Queue is the job queue whose dead-letter queue operators inspect and
	// replay. Required.
	Queue *JobQueue
	// ManagedPolicyName is the policy's name. Default: generated.
	ManagedPolicyName *string
	// AllowPurge lets operators purge the dead-letter queue (`sqsworker dlq
	// purge`). Default false.
	AllowPurge bool
}

// OperatorPolicy is an IAM managed policy for the people and tools who
// inspect and replay dead-lettered jobs (`sqsworker dlq ls/replay/redrive`):
// receive, change visibility, delete, read attributes and list the source
// queues of the dead-letter queue; send to the source queue; start, list and cancel SQS message move
// tasks (redrive) from the dead-letter queue; and, only with AllowPurge,
// purge it. Attach it to a role, group or user.
type OperatorPolicy struct {
	// Construct is the scope of the resources below.
	Construct constructs.Construct
	// Policy is the managed policy.
	Policy awsiam.ManagedPolicy
}

// NewOperatorPolicy defines an OperatorPolicy; it panics, failing
// synthesis, on invalid props.
func NewOperatorPolicy(scope constructs.Construct, id string, props *OperatorPolicyProps) *OperatorPolicy {
	if props == nil {
		props = &OperatorPolicyProps{}
	}
	errs := newPropErrors("OperatorPolicy", id)
	if props.Queue == nil {
		errs.add("Queue is required")
	}
	errs.check()

	q := props.Queue
	dlq, src := q.DeadLetterQueue.QueueArn(), q.Queue.QueueArn()
	inspect := []*string{
		jsii.String("sqs:ReceiveMessage"), jsii.String("sqs:ChangeMessageVisibility"),
		jsii.String("sqs:DeleteMessage"), jsii.String("sqs:GetQueueAttributes"), jsii.String("sqs:GetQueueUrl"),
		// The CLI opens a dead-letter queue only once it has listed the
		// queues that send their dead letters to it: without this, every
		// `sqsworker dlq` command fails (or needs --force).
		jsii.String("sqs:ListDeadLetterSourceQueues"),
		// Message move tasks (redrive) are started, listed and cancelled
		// on the source of the move: the dead-letter queue.
		jsii.String("sqs:StartMessageMoveTask"), jsii.String("sqs:ListMessageMoveTasks"), jsii.String("sqs:CancelMessageMoveTask"),
	}
	if props.AllowPurge {
		inspect = append(inspect, jsii.String("sqs:PurgeQueue"))
	}
	statements := []awsiam.PolicyStatement{
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("InspectAndRedriveDeadLetterQueue"), Actions: &inspect, Resources: &[]*string{dlq},
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("ReplayToSourceQueue"),
			// ListDeadLetterSourceQueues: a replay checks that its
			// destination is no dead-letter queue.
			Actions:   jsii.Strings("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ListDeadLetterSourceQueues"),
			Resources: &[]*string{src},
		}),
	}
	c := &OperatorPolicy{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Policy = awsiam.NewManagedPolicy(c.Construct, jsii.String("Policy"), &awsiam.ManagedPolicyProps{
		ManagedPolicyName: props.ManagedPolicyName,
		Description:       jsii.String("Inspect and replay the dead-lettered jobs of an sqsworker queue"),
		Statements:        &statements,
	})
	// A KMS-encrypted queue needs the key too: decrypt to read the
	// dead-letter queue, encrypt to send to the source queue.
	if k := q.DeadLetterQueue.EncryptionMasterKey(); k != nil {
		k.GrantDecrypt(c.Policy)
	}
	if k := q.Queue.EncryptionMasterKey(); k != nil {
		k.GrantEncryptDecrypt(c.Policy)
	}
	return c
}
