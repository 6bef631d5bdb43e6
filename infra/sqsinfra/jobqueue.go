package sqsinfra

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Defaults of JobQueueProps, ExistingJobQueueProps and QueueAlarmProps.
const (
	DefaultMaxReceiveCount        = 5
	DefaultVisibilityTimeoutSec   = 30 // SQS's default
	DefaultDepthAlarmThreshold    = 1000
	DefaultAlarmEvaluationPeriods = 5
	DefaultLatencyBudgetMinutes   = 15
	DefaultBreakerOpenMinutes     = 5
	// DefaultMetricsNamespace is the CloudWatch namespace of the runtimes'
	// EMF metrics: metrics.NewEMF's and `sqsworker run --metrics emf`'s
	// default.
	DefaultMetricsNamespace = "sqsworker"
)

// MaxQueueNameLength is SQS's limit on a queue name, ".fifo" included.
const MaxQueueNameLength = 80

// QueueAlarmProps configures the alarms of a JobQueue. Every field is
// optional; each alarm is on unless disabled, and notifies Topic (ALARM and
// OK) when there is one.
type QueueAlarmProps struct {
	// Topic receives the ALARM and OK notifications of the queue's alarms
	// and, unless they are given a topic of their own, of its consumers'
	// (LambdaConsumer, PollerService). Not with CreateTopic. Default nil:
	// alarms without actions, unless CreateTopic.
	Topic awssns.ITopic
	// CreateTopic creates an AlarmTopic (an SNS topic encrypted with a KMS
	// key that only CloudWatch alarms of the stack's account and region
	// may use) for them, in JobQueue.AlarmTopic. Default false.
	CreateTopic bool

	// DepthThreshold is the ApproximateNumberOfMessagesVisible (maximum
	// per minute) above which the depth alarm fires. Must be >= 1. Default
	// 1000 (DefaultDepthAlarmThreshold).
	DepthThreshold *float64
	// EvaluationPeriods is how many consecutive minutes the depth alarm
	// must breach to fire. Must be a whole number >= 1. Default 5
	// (DefaultAlarmEvaluationPeriods).
	EvaluationPeriods *float64
	// BreakerOpenFor is how long the consumers' circuit breaker must stay
	// open (or half-open) before the breaker alarm fires, in whole minutes
	// from 1 to 60. Default 5 minutes (DefaultBreakerOpenMinutes).
	BreakerOpenFor awscdk.Duration

	// DisableDeadLetter turns off the alarm on new dead-letter arrivals.
	// Default false.
	DisableDeadLetter bool
	// DisableAge turns off the alarm on the age of the oldest message.
	// Default false.
	DisableAge bool
	// DisableDepth turns off the alarm on the number of waiting messages.
	// Default false.
	DisableDepth bool
	// DisableBreaker turns off the alarm on the consumers' circuit breaker.
	// Default false.
	DisableBreaker bool
}

// JobQueueProps configures a JobQueue. Every field is optional.
type JobQueueProps struct {
	// QueueName is the queue's physical name; the dead-letter queue is
	// named QueueName + "-dlq" (before ".fifo"). A FIFO queue's name must
	// end in ".fifo". Changing it replaces both queues (see RemovalPolicy).
	// Default: a name made of the construct's path and the first eight
	// characters of the stack's ID (unique to each deployment of the
	// stack), such as "SqsWorkerExample-Jobs-1A2B3C4D-0f1e2d3c"; the
	// dead-letter queue's ends in "-dlq". The queue has a name known
	// before deployment so that the dead-letter queue's
	// RedriveAllowPolicy can name it without a circular reference.
	QueueName *string

	// Fifo makes a FIFO queue (with a FIFO dead-letter queue). Changing it
	// replaces both queues. Default false: a standard queue.
	Fifo bool
	// ContentBasedDeduplication turns on content-based deduplication of a
	// FIFO queue. Default false. Only with Fifo.
	ContentBasedDeduplication bool

	// VisibilityTimeout is the queue's visibility timeout, whole seconds
	// from 0 to 12 hours. A LambdaConsumer needs at least six times its
	// function timeout plus its batching window. Default 30 seconds (SQS's
	// default), raised by each LambdaConsumer of the queue to what it
	// needs.
	VisibilityTimeout awscdk.Duration
	// RetentionPeriod is how long the queue keeps a message, whole seconds
	// from 1 minute to 14 days; at most 13 days for a standard queue with
	// the generated dead-letter queue, whose 14 days count from a message's
	// first send. Default 4 days (SQS's default).
	RetentionPeriod awscdk.Duration

	// MaxReceiveCount is the redrive policy's maxReceiveCount: the receive
	// after which SQS moves a message to the dead-letter queue. Must be a
	// whole number from 1 to 1000; a LambdaConsumer needs at least 5.
	// Default 5 (DefaultMaxReceiveCount).
	MaxReceiveCount *float64
	// DeadLetterQueue is an existing dead-letter queue to use. It must be a
	// FIFO queue exactly when Fifo is set; its RedriveAllowPolicy is its
	// owner's to set. For a standard queue, its retention must be longer
	// than the queue's: SQS keeps a message's enqueue time when it moves
	// it there. Default: a new queue with a retention of 14 days,
	// the same encryption, TLS enforced and a RedriveAllowPolicy that
	// admits this queue only.
	DeadLetterQueue awssqs.IQueue

	// EncryptionKey encrypts both queues with this KMS key. Default nil:
	// SQS-managed server-side encryption (SSE-SQS).
	EncryptionKey awskms.IKey

	// RemovalPolicy is what happens to the queues (and their messages)
	// when they leave the stack, on `cdk destroy` or when a change of
	// QueueName or Fifo replaces them: CloudFormation's DeletionPolicy and
	// UpdateReplacePolicy. With RETAIN a replaced queue is kept with its
	// messages, which a consumer of the new queue no longer sees: drain it
	// before such a change. Default RETAIN, for the queue as for the
	// dead-letter queue: pending and dead-lettered jobs outlive a mistaken
	// deletion (idle queues cost nothing; the generated names make a
	// redeployed stack's queues new ones).
	RemovalPolicy awscdk.RemovalPolicy

	// LatencyBudget is how long a job may take from its send to its
	// end: the age alarm fires when the oldest message is older (SQS
	// counts a message's age until it is deleted, its run included), and
	// a PollerService derives its scaling target from it. Whole seconds,
	// at least 1 minute. Default 15 minutes (DefaultLatencyBudgetMinutes).
	LatencyBudget awscdk.Duration
	// MetricsNamespace is the CloudWatch namespace of the consumers' EMF
	// metrics (metrics.NewEMF, `sqsworker run --metrics-namespace`): the
	// breaker alarm and the Dashboard read it, a PollerService writes it.
	// Default "sqsworker" (DefaultMetricsNamespace).
	MetricsNamespace *string

	// Alarms configures the alarms. Default: all on, without a topic.
	Alarms QueueAlarmProps
}

// ExistingJobQueueProps describes an existing queue and its dead-letter
// queue for ImportJobQueue. Queue, DeadLetterQueue, VisibilityTimeout and
// MaxReceiveCount are required: the constructs check consumers against
// them, and an imported queue's attributes are not known when the app is
// synthesized.
type ExistingJobQueueProps struct {
	// Queue is the existing job queue (awssqs.Queue_FromQueueArn,
	// Queue_FromQueueAttributes). A queue encrypted with a
	// customer-managed KMS key must be imported with its key
	// (Queue_FromQueueAttributes with KeyArn): the grants of consumers
	// and schedules include the key only when the queue knows it, and
	// without it their sends fail with KMS's AccessDenied. Required.
	Queue awssqs.IQueue
	// DeadLetterQueue is the target of the queue's redrive policy, with
	// its KMS key as for Queue. Required.
	DeadLetterQueue awssqs.IQueue
	// VisibilityTimeout is the queue's visibility timeout. Required.
	VisibilityTimeout awscdk.Duration
	// MaxReceiveCount is the maxReceiveCount of the queue's redrive
	// policy. Required.
	MaxReceiveCount *float64
	// LatencyBudget is as in JobQueueProps. Default 15 minutes.
	LatencyBudget awscdk.Duration
	// MetricsNamespace is as in JobQueueProps. Default "sqsworker".
	MetricsNamespace *string
	// Alarms configures the alarms, as for a JobQueue. Default: all on,
	// without a topic.
	Alarms QueueAlarmProps
}

// JobQueue is a queue with a dead-letter queue and a redrive policy, TLS-only
// queue policies, encryption at rest, a dead-letter queue that admits this
// queue only (RedriveAllowPolicy), and alarms: new dead-letter arrivals, the
// oldest message older than the latency budget, the depth, and the
// consumers' circuit breaker open too long.
type JobQueue struct {
	// Construct is the scope of the resources below. (A jsii construct
	// cannot be embedded in a Go struct passed back to jsii.)
	Construct constructs.Construct

	// Queue is the job queue.
	Queue awssqs.IQueue
	// DeadLetterQueue is where messages go after MaxReceiveCount receives.
	DeadLetterQueue awssqs.IQueue
	// VisibilityTimeout is the queue's visibility timeout (as raised by
	// the LambdaConsumers defined so far).
	VisibilityTimeout awscdk.Duration
	// MaxReceiveCount is the redrive policy's maxReceiveCount.
	MaxReceiveCount float64
	// Fifo reports a FIFO queue.
	Fifo bool
	// LatencyBudget is how long a job may wait in the queue.
	LatencyBudget awscdk.Duration
	// MetricsNamespace is the namespace of the consumers' EMF metrics.
	MetricsNamespace string
	// AlarmTopic is the topic of the alarms (given or created), nil
	// without one.
	AlarmTopic awssns.ITopic
	// CreatedAlarmTopic is the AlarmTopic made for QueueAlarmProps.CreateTopic,
	// nil otherwise.
	CreatedAlarmTopic *AlarmTopic

	// DeadLetterAlarm fires when messages arrive in the dead-letter queue
	// (each arrival, not a non-empty queue: see NewJobQueue). Nil when
	// disabled.
	DeadLetterAlarm awscloudwatch.Alarm
	// AgeAlarm fires when the oldest message is older than LatencyBudget.
	// Nil when disabled.
	AgeAlarm awscloudwatch.Alarm
	// DepthAlarm fires when more than DepthThreshold messages wait. Nil
	// when disabled.
	DepthAlarm awscloudwatch.Alarm
	// BreakerAlarm fires when the consumers' circuit breaker stays open.
	// Nil when disabled.
	BreakerAlarm awscloudwatch.Alarm

	// cfnQueue is the queue's L1 resource (nil for an imported queue), to
	// raise the visibility timeout when it was not given.
	cfnQueue            awssqs.CfnQueue
	visibilityDefaulted bool
	visibilitySeconds   float64
	// contentDeduplication reports a FIFO queue made with
	// ContentBasedDeduplication (a Schedule's FIFO target needs it).
	contentDeduplication bool
	// schedules maps the Name of each Schedule sending to the queue to
	// its construct's path: one Name, one schedule (see ScheduleProps.Name).
	schedules map[string]string
}

// NewJobQueue defines a JobQueue; it panics, failing synthesis, on invalid
// props.
func NewJobQueue(scope constructs.Construct, id string, props *JobQueueProps) *JobQueue {
	return newJobQueue(scope, id, props, "JobQueue", 60)
}

// queueNameRe is what SQS takes as a queue's name.
var queueNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}(\.fifo)?$`)

// maxRetentionWithDLQ is the longest RetentionPeriod of a standard queue
// with the generated dead-letter queue, in seconds: a day shorter than the
// dead-letter queue's 14 days, which count from a message's first send.
const maxRetentionWithDLQ = 13 * 86400

// newJobQueue is NewJobQueue for the construct kind (in error messages),
// with a latency budget of at least minBudget seconds: a minute for a
// JobQueue, whose budget also sets a PollerService's scaling target; a
// second for a level of PriorityQueues.
func newJobQueue(scope constructs.Construct, id string, props *JobQueueProps, kind string, minBudget float64) *JobQueue {
	if props == nil {
		props = &JobQueueProps{}
	}
	errs := newPropErrors(kind, id)

	vs := errs.seconds("VisibilityTimeout", props.VisibilityTimeout, awscdk.Duration_Seconds(jsii.Number(DefaultVisibilityTimeoutSec)))
	if known(vs) && (vs < 0 || vs > 12*3600 || !isWhole(vs)) {
		errs.add("VisibilityTimeout must be whole seconds from 0 to 12 hours, got %gs", vs)
	}
	rs := errs.seconds("RetentionPeriod", props.RetentionPeriod, awscdk.Duration_Days(jsii.Number(4)))
	if known(rs) && (rs < 60 || rs > 14*86400 || !isWhole(rs)) {
		errs.add("RetentionPeriod must be whole seconds from 1 minute to 14 days, got %gs", rs)
	}
	if known(rs) && !props.Fifo && props.DeadLetterQueue == nil && rs > maxRetentionWithDLQ {
		errs.add("RetentionPeriod must be at most %d days for a standard queue (got %g days): its dead-letter queue keeps messages 14 days from their first send (SQS keeps a standard message's enqueue time when it moves it), and a message dead-lettered late in a longer retention would expire there within hours", maxRetentionWithDLQ/86400, rs/86400)
	}
	maxReceive := errs.number("MaxReceiveCount", props.MaxReceiveCount, DefaultMaxReceiveCount)
	if known(maxReceive) && (maxReceive < 1 || maxReceive > 1000 || !isWhole(maxReceive)) {
		errs.add("MaxReceiveCount must be a whole number from 1 to 1000, got %g", maxReceive)
	}
	if props.ContentBasedDeduplication && !props.Fifo {
		errs.add("ContentBasedDeduplication needs Fifo")
	}
	if n := props.QueueName; n != nil && !*awscdk.Token_IsUnresolved(n) {
		if !queueNameRe.MatchString(*n) {
			errs.add("QueueName %q must be 1 to 80 letters, digits, '-' and '_' (and \".fifo\" for a FIFO queue)", *n)
		}
		if props.Fifo != strings.HasSuffix(*n, ".fifo") {
			errs.add("QueueName %q must end in \".fifo\" exactly when Fifo is set (Fifo=%t)", *n, props.Fifo)
		}
		if dlq := dlqName(*n); props.DeadLetterQueue == nil && len(dlq) > MaxQueueNameLength {
			errs.add("QueueName %q is too long: the dead-letter queue's name %q would exceed SQS's %d characters", *n, dlq, MaxQueueNameLength)
		}
	}
	if dlq := props.DeadLetterQueue; dlq != nil {
		dlqFifo := dlq.Fifo() != nil && *dlq.Fifo()
		if props.Fifo && !dlqFifo {
			errs.add("DeadLetterQueue must be a FIFO queue for a FIFO queue (Fifo=true), got the standard queue %s", pathOf(dlq))
		}
		if !props.Fifo && dlqFifo {
			errs.add("DeadLetterQueue must be a standard queue for a standard queue (Fifo=false), got the FIFO queue %s", pathOf(dlq))
		}
	}
	common := checkCommon(errs, props.LatencyBudget, props.MetricsNamespace, &props.Alarms, minBudget)
	if known(common.budget) && known(rs) && common.budget >= rs {
		errs.add("LatencyBudget (%gs) must be shorter than RetentionPeriod (%gs): a message expires before its age passes the budget, and the age alarm never fires", common.budget, rs)
	}
	errs.check()

	c := &JobQueue{
		Construct:           constructs.NewConstruct(scope, jsii.String(id)),
		VisibilityTimeout:   secondsDuration(vs),
		MaxReceiveCount:     maxReceive,
		Fifo:                props.Fifo,
		visibilityDefaulted: props.VisibilityTimeout == nil,
		visibilitySeconds:   vs,

		contentDeduplication: props.ContentBasedDeduplication,
	}
	encryption := awssqs.QueueEncryption_SQS_MANAGED
	if props.EncryptionKey != nil {
		encryption = awssqs.QueueEncryption_KMS
	}
	var fifo *bool
	if props.Fifo {
		fifo = jsii.Bool(true)
	}
	removal := props.RemovalPolicy
	if removal == "" {
		removal = awscdk.RemovalPolicy_RETAIN
	}

	name, deadName := c.names(props.QueueName, props.Fifo)
	stack := awscdk.Stack_Of(c.Construct)
	queueArn := stack.FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("sqs"), Resource: name, ArnFormat: awscdk.ArnFormat_NO_RESOURCE_NAME,
	})

	c.DeadLetterQueue = props.DeadLetterQueue
	if c.DeadLetterQueue == nil {
		c.DeadLetterQueue = awssqs.NewQueue(c.Construct, jsii.String("DeadLetterQueue"), &awssqs.QueueProps{
			QueueName:           deadName,
			Fifo:                fifo,
			RetentionPeriod:     awscdk.Duration_Days(jsii.Number(14)),
			Encryption:          encryption,
			EncryptionMasterKey: props.EncryptionKey,
			EnforceSSL:          jsii.Bool(true),
			RemovalPolicy:       removal,
			// Only this queue may use it as its dead-letter queue: the
			// queue's ARN is built from its name, since a reference
			// (Fn::GetAtt) would make the two queues depend on each other.
			RedriveAllowPolicy: &awssqs.RedriveAllowPolicy{
				RedrivePermission: awssqs.RedrivePermission_BY_QUEUE,
				SourceQueues:      &[]awssqs.IQueue{awssqs.Queue_FromQueueArn(c.Construct, jsii.String("SourceQueueRef"), queueArn)},
			},
		})
	}

	var cbd *bool
	if props.ContentBasedDeduplication {
		cbd = jsii.Bool(true)
	}
	queue := awssqs.NewQueue(c.Construct, jsii.String("Queue"), &awssqs.QueueProps{
		QueueName:                 name,
		Fifo:                      fifo,
		ContentBasedDeduplication: cbd,
		VisibilityTimeout:         c.VisibilityTimeout,
		RetentionPeriod:           secondsDuration(rs),
		Encryption:                encryption,
		EncryptionMasterKey:       props.EncryptionKey,
		EnforceSSL:                jsii.Bool(true),
		RemovalPolicy:             removal,
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			Queue:           c.DeadLetterQueue,
			MaxReceiveCount: jsii.Number(maxReceive),
		},
	})
	c.Queue = queue
	c.cfnQueue = queue.Node().DefaultChild().(awssqs.CfnQueue)
	c.addAlarms(common, &props.Alarms)
	return c
}

// ImportJobQueue makes a JobQueue of an existing queue and its dead-letter
// queue, for consumers, alarms, a dashboard and an operator policy: nothing
// of the queues themselves is changed. It panics, failing synthesis, on
// invalid props.
func ImportJobQueue(scope constructs.Construct, id string, props *ExistingJobQueueProps) *JobQueue {
	if props == nil {
		props = &ExistingJobQueueProps{}
	}
	errs := newPropErrors("ImportJobQueue", id)
	if props.Queue == nil {
		errs.add("Queue is required: the existing queue, such as awssqs.Queue_FromQueueArn(scope, id, arn)")
	}
	if props.DeadLetterQueue == nil {
		errs.add("DeadLetterQueue is required: the target of the queue's redrive policy (the runtimes send permanent failures there)")
	}
	vs := math.NaN()
	if props.VisibilityTimeout == nil {
		errs.add("VisibilityTimeout is required: the queue's visibility timeout, which a LambdaConsumer is checked against")
	} else if vs = errs.seconds("VisibilityTimeout", props.VisibilityTimeout, nil); known(vs) && (vs < 0 || vs > 12*3600 || !isWhole(vs)) {
		errs.add("VisibilityTimeout must be whole seconds from 0 to 12 hours, got %gs", vs)
	}
	maxReceive := math.NaN()
	if props.MaxReceiveCount == nil {
		errs.add("MaxReceiveCount is required: the maxReceiveCount of the queue's redrive policy, which a LambdaConsumer is checked against")
	} else if maxReceive = errs.number("MaxReceiveCount", props.MaxReceiveCount, 0); known(maxReceive) && (maxReceive < 1 || maxReceive > 1000 || !isWhole(maxReceive)) {
		errs.add("MaxReceiveCount must be a whole number from 1 to 1000, got %g", maxReceive)
	}
	if props.Queue != nil && props.DeadLetterQueue != nil {
		q, d := props.Queue.Fifo() != nil && *props.Queue.Fifo(), props.DeadLetterQueue.Fifo() != nil && *props.DeadLetterQueue.Fifo()
		if q != d {
			errs.add("Queue and DeadLetterQueue must both be FIFO queues or both standard queues (FIFO: %t and %t)", q, d)
		}
	}
	common := checkCommon(errs, props.LatencyBudget, props.MetricsNamespace, &props.Alarms, 60)
	errs.check()

	c := &JobQueue{
		Construct:         constructs.NewConstruct(scope, jsii.String(id)),
		Queue:             props.Queue,
		DeadLetterQueue:   props.DeadLetterQueue,
		VisibilityTimeout: secondsDuration(vs),
		MaxReceiveCount:   maxReceive,
		Fifo:              props.Queue.Fifo() != nil && *props.Queue.Fifo(),
		visibilitySeconds: vs,
	}
	c.addAlarms(common, &props.Alarms)
	return c
}

// commonProps are the checked props that NewJobQueue and ImportJobQueue
// share.
// minAgeAlarmSec is the least threshold of the age alarm: SQS's metrics
// come by the minute.
const minAgeAlarmSec = 60

type commonProps struct {
	budget, breakerMinutes, depth, periods float64
	namespace                              string
}

func checkCommon(errs *propErrors, budget awscdk.Duration, namespace *string, a *QueueAlarmProps, minBudget float64) commonProps {
	var p commonProps
	p.budget = errs.seconds("LatencyBudget", budget, awscdk.Duration_Minutes(jsii.Number(DefaultLatencyBudgetMinutes)))
	if known(p.budget) && minBudget >= 60 && (p.budget < minBudget || !isWhole(p.budget)) {
		errs.add("LatencyBudget must be whole seconds, at least 1 minute (the resolution of SQS's metrics), got %gs", p.budget)
	} else if known(p.budget) && (p.budget < minBudget || !isWhole(p.budget)) {
		errs.add("LatencyBudget must be whole seconds, at least %gs, got %gs", minBudget, p.budget)
	}
	p.namespace = DefaultMetricsNamespace
	if namespace != nil {
		p.namespace = *namespace
		if *awscdk.Token_IsUnresolved(namespace) {
			errs.add("MetricsNamespace is a token: give the literal namespace the consumers write their metrics to")
		} else if p.namespace == "" || strings.HasPrefix(p.namespace, "AWS/") {
			errs.add("MetricsNamespace must be a non-empty namespace outside AWS/, got %q", p.namespace)
		}
	}
	if a.Topic != nil && a.CreateTopic {
		errs.add("Alarms: give Topic or CreateTopic, not both")
	}
	p.depth = errs.number("Alarms.DepthThreshold", a.DepthThreshold, DefaultDepthAlarmThreshold)
	if known(p.depth) && p.depth < 1 {
		errs.add("Alarms.DepthThreshold must be >= 1, got %g", p.depth)
	}
	p.periods = errs.number("Alarms.EvaluationPeriods", a.EvaluationPeriods, DefaultAlarmEvaluationPeriods)
	if known(p.periods) && (p.periods < 1 || p.periods > 1440 || !isWhole(p.periods)) {
		errs.add("Alarms.EvaluationPeriods must be a whole number from 1 to 1440 (CloudWatch evaluates a day at most, of one-minute periods), got %g", p.periods)
	}
	b := errs.seconds("Alarms.BreakerOpenFor", a.BreakerOpenFor, awscdk.Duration_Minutes(jsii.Number(DefaultBreakerOpenMinutes)))
	if p.breakerMinutes = b / 60; known(b) && (p.breakerMinutes < 1 || p.breakerMinutes > 60 || !isWhole(p.breakerMinutes)) {
		errs.add("Alarms.BreakerOpenFor must be whole minutes from 1 to 60 (one alarm period a minute), got %gs", b)
	}
	return p
}

// names returns the physical names of the queue and of the dead-letter
// queue (see JobQueueProps.QueueName).
func (c *JobQueue) names(given *string, fifo bool) (queue, dlq *string) {
	suffix := ""
	if fifo {
		suffix = ".fifo"
	}
	if given != nil && !*awscdk.Token_IsUnresolved(given) {
		return given, jsii.String(dlqName(*given))
	}
	// The base leaves room for "-" + 8 characters of the stack ID, "-dlq"
	// and ".fifo".
	base := awscdk.Names_UniqueResourceName(c.Construct, &awscdk.UniqueResourceNameOptions{
		MaxLength: jsii.Number(MaxQueueNameLength - 9 - 4 - 5), Separator: jsii.String("-"),
	})
	// AWS::StackId is arn:...:stack/NAME/UUID: the UUID's first group.
	stackID := awscdk.Fn_Select(jsii.Number(0), awscdk.Fn_Split(jsii.String("-"),
		awscdk.Fn_Select(jsii.Number(2), awscdk.Fn_Split(jsii.String("/"), awscdk.Aws_STACK_ID(), nil)), nil))
	// Concatenated, not Fn_Join: a string with a token inside still ends
	// in ".fifo" for the Queue construct's check, and synthesizes to a
	// Fn::Join.
	dlq = jsii.String(*base + "-" + *stackID + "-dlq" + suffix)
	if given != nil { // a token: CloudFormation resolves it
		return given, dlq
	}
	return jsii.String(*base + "-" + *stackID + suffix), dlq
}

// dlqName is the dead-letter queue's name for the queue name q.
func dlqName(q string) string {
	base, fifo := strings.CutSuffix(q, ".fifo")
	if fifo {
		return base + "-dlq.fifo"
	}
	return base + "-dlq"
}

// QueueNameDimension is the queue's name as the runtimes' metrics carry it
// in their "queue" dimension (metrics.QueueName of its URL).
func (c *JobQueue) QueueNameDimension() *string { return c.Queue.QueueName() }

// raiseVisibility makes the queue's visibility timeout at least s seconds
// for a consumer, when it was not given; it reports whether the timeout is
// (now) at least s.
func (c *JobQueue) raiseVisibility(s float64) bool {
	if known(c.visibilitySeconds) && c.visibilitySeconds >= s {
		return true
	}
	if !c.visibilityDefaulted || c.cfnQueue == nil || s > 12*3600 {
		return false
	}
	c.visibilitySeconds = s
	c.VisibilityTimeout = secondsDuration(s)
	c.cfnQueue.SetVisibilityTimeout(jsii.Number(s))
	return true
}

func (c *JobQueue) addAlarms(p commonProps, a *QueueAlarmProps) {
	c.LatencyBudget = secondsDuration(p.budget)
	c.MetricsNamespace = p.namespace
	c.AlarmTopic = a.Topic
	if a.CreateTopic {
		c.CreatedAlarmTopic = NewAlarmTopic(c.Construct, "AlarmTopic", nil)
		c.AlarmTopic = c.CreatedAlarmTopic.Topic
	}
	perMinute := func(stat string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: minute(), Statistic: jsii.String(stat)}
	}

	if !a.DisableDeadLetter {
		// Arrivals, not depth: an alarm on "visible > 0" stays in ALARM
		// until someone empties the dead-letter queue and never fires for
		// the next incident. A message moved by the redrive policy raises
		// the queue's depth; one sent by a runtime (permanent failures)
		// is counted in NumberOfMessagesSent as well, which SQS does not
		// do for redrive moves. The depth is visible and in flight
		// together, so that inspecting the queue (`sqsworker dlq ls`
		// receives and releases its messages) is no arrival. SQS reports
		// nothing for a queue empty and idle for six hours, so the first
		// move into such a queue has no minute before it to differ from:
		// FILL makes that leading gap a depth of 0, and a gap between two
		// datapoints (one missing) the depth before it, not 0, which
		// would count the whole depth as arrivals. Its metrics can take up to
		// 15 minutes to resume, so the alarm looks back 15 minutes, any
		// one of which may breach.
		c.DeadLetterAlarm = awscloudwatch.NewAlarm(c.Construct, jsii.String("DeadLetterAlarm"), &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String("Messages arrived in the dead-letter queue: jobs failed permanently or ran out of attempts. Inspect them with `sqsworker dlq ls`; the alarm returns to OK about 15 minutes later and fires again at the next arrival."),
			Metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression: jsii.String("MAX([DIFF(FILL(FILL(visible, REPEAT), 0) + FILL(FILL(inFlight, REPEAT), 0)), sent])"),
				UsingMetrics: &map[string]awscloudwatch.IMetric{
					"visible":  c.DeadLetterQueue.MetricApproximateNumberOfMessagesVisible(perMinute("Maximum")),
					"inFlight": c.DeadLetterQueue.MetricApproximateNumberOfMessagesNotVisible(perMinute("Maximum")),
					"sent":     c.DeadLetterQueue.MetricNumberOfMessagesSent(perMinute("Sum")),
				},
				Label:  jsii.String("Messages arrived in the dead-letter queue"),
				Period: minute(),
			}),
			Threshold:          jsii.Number(0),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(15),
			DatapointsToAlarm:  jsii.Number(1),
			// SQS stops reporting the metrics of a queue inactive for a
			// while: no data means no arrival.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	if !a.DisableAge {
		// SQS counts a message's age until it is deleted, its handler's
		// run included, and reports it by the minute: a threshold under a
		// minute (a priority level's budget of seconds) would fire on
		// healthy jobs that take a second.
		threshold := max(p.budget, minAgeAlarmSec)
		c.AgeAlarm = awscloudwatch.NewAlarm(c.Construct, jsii.String("OldestMessageAgeAlarm"), &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String(fmt.Sprintf("The oldest message has been in the queue (waiting, or running undeleted) longer than %s: consumers are stuck, failing or too few.", goDuration(threshold))),
			Metric:           c.Queue.MetricApproximateAgeOfOldestMessage(perMinute("Maximum")),
			Threshold:        jsii.Number(threshold),
			// One minute over the budget is the budget missed.
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			// No data: an inactive queue, which holds no message.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	if !a.DisableDepth {
		c.DepthAlarm = awscloudwatch.NewAlarm(c.Construct, jsii.String("DepthAlarm"), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String("Too many messages are waiting in the queue: consumers cannot keep up."),
			Metric:             c.Queue.MetricApproximateNumberOfMessagesVisible(perMinute("Maximum")),
			Threshold:          jsii.Number(p.depth),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(p.periods),
			// No data: an inactive queue, which holds no message.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	if !a.DisableBreaker {
		c.BreakerAlarm = newBreakerAlarm(c, p.breakerMinutes)
	}
	notify(c.AlarmTopic, c.DeadLetterAlarm, c.AgeAlarm, c.DepthAlarm, c.BreakerAlarm)
}

// BreakerStateMetric is the consumers' breaker_state gauge for the queue
// (0 closed, 1 open, 2 half-open), the maximum over the consumers that
// reported in each period.
func (c *JobQueue) BreakerStateMetric(period awscdk.Duration) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String(c.MetricsNamespace), MetricName: jsii.String("breaker_state"),
		DimensionsMap: &map[string]*string{"queue": c.QueueNameDimension()},
		Period:        period, Statistic: jsii.String("Maximum"), Label: jsii.String("breaker state (0 closed, 1 open, 2 half-open)"),
	})
}

// newBreakerAlarm is the alarm on a breaker open (or half-open) for
// minutes minutes.
//
// The runtimes write breaker_state when the breaker changes state, and an
// EMF gauge once per flush (a minute for the worker, each invocation on
// Lambda): while the breaker is open its probes (every 5 s, doubling up to
// 60 s, ±20 %) change the state at least every 72 s, so a minute may hold
// no data point; while it is closed, nothing is written for hours. Hence:
//   - FILL(state, REPEAT) carries the last state reported over the minutes
//     without one (within the alarm's window), so that an outage is
//     breaching through the gaps between probes;
//   - missing data (no report in the whole window, the normal state of a
//     closed breaker) is not breaching: treating it as breaching or as
//     missing would hold the alarm in ALARM or INSUFFICIENT_DATA on a
//     healthy system;
//   - the alarm needs minutes consecutive breaching minutes: a breaker
//     that opens and closes again (a 0 reported) in that time does not
//     fire it. A window that starts in a gap between probes delays the
//     alarm by that gap, a minute at most.
//
// It fires for the worker (PollerService with --metrics emf) and for a
// Lambda function that writes metrics.NewEMF in the queue's namespace;
// without EMF metrics it stays OK.
func newBreakerAlarm(c *JobQueue, minutes float64) awscloudwatch.Alarm {
	return awscloudwatch.NewAlarm(c.Construct, jsii.String("BreakerOpenAlarm"), &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String(fmt.Sprintf("The consumers' circuit breaker has been open for %g minutes: a dependency is unavailable and messages wait in the queue (none is dead-lettered for it).", minutes)),
		Metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression:   jsii.String("FILL(state, REPEAT)"),
			UsingMetrics: &map[string]awscloudwatch.IMetric{"state": c.BreakerStateMetric(minute())},
			Label:        jsii.String("breaker state, last reported"),
			Period:       minute(),
		}),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(minutes),
		DatapointsToAlarm:  jsii.Number(minutes),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
}
