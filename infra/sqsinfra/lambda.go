package sqsinfra

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// DefaultCodeDir is the default LambdaConsumerProps.CodeDir: where the
// repository's `make lambda` puts the arm64 bootstrap, relative to infra/
// (where cdk.json is, and so where `cdk synth` runs the app).
const DefaultCodeDir = "../bin/lambda/arm64"

// VisibilityTimeoutFactor is how many function timeouts the queue's
// visibility timeout must at least be: AWS's rule for SQS event sources
// (the margin lets Lambda retry a throttled batch).
const VisibilityTimeoutFactor = 6

// MinLambdaMaxReceiveCount is the least maxReceiveCount a queue consumed by
// Lambda may have, as AWS advises: an invocation that is throttled, or
// fails to start, still counts a receive of each message of its batch.
const MinLambdaMaxReceiveCount = 5

// Environment variables a LambdaConsumer sets for the function's main to
// pass on to lambda.Config and metrics.NewEMF.
const (
	// BatchingWindowEnv holds the event source's maximum batching window
	// in Go's duration syntax ("1s"), for lambda.Config.BatchingWindow
	// (the heartbeat counts from the start of the window). Unset without
	// a window.
	BatchingWindowEnv = "SQSWORKER_BATCHING_WINDOW"
	// MetricsNamespaceEnv holds the queue's MetricsNamespace, for
	// metrics.NewEMF.
	MetricsNamespaceEnv = "SQSWORKER_METRICS_NAMESPACE"
)

// lambdaReservedEnv are environment variables Lambda sets and refuses in a
// function's configuration (besides AWS_LAMBDA_*).
var lambdaReservedEnv = map[string]bool{
	"_HANDLER": true, "_X_AMZN_TRACE_ID": true, "AWS_REGION": true, "AWS_DEFAULT_REGION": true, "AWS_EXECUTION_ENV": true,
	"AWS_ACCESS_KEY": true, "AWS_ACCESS_KEY_ID": true, "AWS_SECRET_ACCESS_KEY": true, "AWS_SESSION_TOKEN": true,
	"LAMBDA_TASK_ROOT": true, "LAMBDA_RUNTIME_DIR": true,
}

// Defaults of LambdaConsumerProps.
const (
	DefaultBatchSize          = 10
	DefaultMemorySize         = 256
	DefaultFunctionTimeoutSec = 30
)

// LambdaConsumerProps configures a LambdaConsumer. Queue is required.
type LambdaConsumerProps struct {
	// Queue is the job queue to consume. Required. Its visibility timeout
	// must be at least VisibilityTimeoutFactor (6) times Timeout plus
	// MaxBatchingWindow: when the queue's VisibilityTimeout was not given,
	// the consumer raises it to that; when it was, it is checked. Its
	// MaxReceiveCount must be at least 5 (MinLambdaMaxReceiveCount).
	Queue *JobQueue
	// Table, when set, is the idempotency table the function uses as a
	// DynamoStore (IdempotencyTable.GrantStore); its name is in the
	// environment as IDEMPOTENCY_TABLE. Default nil.
	Table *IdempotencyTable
	// EffectTables are the handler's own tables that idempotency.AddWrites
	// writes to in the idempotency record's transaction (GrantEffects).
	// Default none.
	EffectTables []awsdynamodb.ITable

	// CodeDir is the directory holding the function's `bootstrap`
	// executable (linux/arm64, built by `make lambda`). Default
	// "../bin/lambda/arm64" (DefaultCodeDir).
	CodeDir *string
	// FunctionName is the function's physical name. Default: generated.
	FunctionName *string
	// Timeout is the function timeout, whole seconds from 1 second to 15
	// minutes. Default 30 seconds.
	Timeout awscdk.Duration
	// MemorySize in MiB, from 128 to 10240. Default 256.
	MemorySize *float64
	// Environment is added to the function's environment; not the
	// variables the construct sets (SQSWORKER_BATCHING_WINDOW,
	// SQSWORKER_METRICS_NAMESPACE, IDEMPOTENCY_TABLE with Table) nor those
	// Lambda reserves. Default none.
	Environment map[string]string
	// LogRetention is how long the function's log group keeps logs.
	// Default one month.
	LogRetention awslogs.RetentionDays
	// ReservedConcurrency reserves (and caps) the function's concurrent
	// executions, from 2; it needs MaxConcurrency, at most it, or the event
	// source's invocations are throttled (and a throttled batch spends a
	// receive of each message, so that jobs end in the dead-letter queue
	// unrun). Default nil: the account's unreserved pool.
	ReservedConcurrency *float64
	// Tracing is the function's X-Ray tracing mode; Active lets the
	// function write traces (xray:PutTraceSegments on *). Default: Lambda's
	// (PassThrough).
	Tracing awslambda.Tracing
	// Vpc runs the function in this VPC (to reach private endpoints); the
	// role then gets the network-interface actions Lambda needs, on *, as
	// EC2 does not scope them. Default nil: Lambda's network.
	Vpc awsec2.IVpc
	// VpcSubnets are the subnets of Vpc to use. Only with Vpc. Default: the
	// VPC's private subnets.
	VpcSubnets *awsec2.SubnetSelection
	// SecurityGroups are the function's security groups in Vpc. Only with
	// Vpc. Default: a new one allowing all outbound traffic.
	SecurityGroups []awsec2.ISecurityGroup

	// BatchSize is the most records per invocation: 1 to 10 for a FIFO
	// queue, 1 to 10000 otherwise (above 10 needs MaxBatchingWindow).
	// Default 10.
	BatchSize *float64
	// MaxBatchingWindow is how long the event source gathers records
	// before invoking, whole seconds up to 5 minutes; not for FIFO queues.
	// The records are received, and their visibility timeout runs, from
	// the start of the window: it counts in the queue's visibility
	// timeout, and the function gets it in $SQSWORKER_BATCHING_WINDOW for
	// lambda.Config.BatchingWindow. Default none.
	MaxBatchingWindow awscdk.Duration
	// MaxConcurrency caps the concurrent invocations that the event source
	// makes (its ScalingConfig), 2 to 1000. Default nil: no cap.
	MaxConcurrency *float64
	// Filters are the event source's filter criteria: event patterns on
	// the record's "body" (the only key SQS event sources filter on), at
	// most 10. Lambda deletes the messages that match none of them from
	// the queue: they never run, nor go to the dead-letter queue. Default
	// none: every message runs.
	Filters []map[string]any

	// AlarmTopic receives the function's alarms (ALARM and OK). Default:
	// the queue's AlarmTopic.
	AlarmTopic awssns.ITopic
	// DisableErrorAlarm turns off the alarm on function errors. With
	// ReportBatchItemFailures a failing job is not a function error: the
	// errors are crashes, timeouts and out-of-memory kills, which fail
	// the whole batch. Default false.
	DisableErrorAlarm bool
	// DisableThrottleAlarm turns off the alarm on throttled invocations,
	// each of which spends a receive of every message of its batch.
	// Default false.
	DisableThrottleAlarm bool
}

// LambdaConsumer is a Go function (provided.al2023, arm64) consuming a
// JobQueue through an SQS event source with ReportBatchItemFailures. Its
// role may write to its own log group only, receive, delete and change the
// visibility of the queue's messages, send to its dead-letter queue
// (permanent failures), and use the idempotency and effect tables. Alarms
// on its errors and throttles notify the queue's topic.
type LambdaConsumer struct {
	// Construct is the scope of the resources below. (A jsii construct
	// cannot be embedded in a Go struct passed back to jsii.)
	Construct constructs.Construct
	// Function is the Lambda function.
	Function awslambda.Function
	// Role is the function's execution role.
	Role awsiam.Role
	// EventSourceMapping is the SQS event source mapping. (Defined with
	// awslambda rather than awslambdaeventsources, whose Go package pulls
	// in API Gateway, Glue and more: a third of the app's compile time.)
	EventSourceMapping awslambda.EventSourceMapping
	// EventSourceMappings are the event source mappings, one per queue:
	// EventSourceMapping alone for a consumer of a JobQueue, one per
	// level, highest first, for NewPriorityLambdaConsumer.
	EventSourceMappings []awslambda.EventSourceMapping
	// LogGroup is the function's log group.
	LogGroup awslogs.LogGroup
	// ErrorAlarm fires on function errors; nil when disabled.
	ErrorAlarm awscloudwatch.Alarm
	// ThrottleAlarm fires on throttled invocations; nil when disabled.
	ThrottleAlarm awscloudwatch.Alarm
}

// lambdaSource is a queue a LambdaConsumer's function consumes through an
// event source mapping of its own: the consumer's Queue, or each level of
// PriorityQueues.
type lambdaSource struct {
	id     string // of the event source mapping's construct
	prefix string // of the error messages about this source
	queue  *JobQueue
	// maxConcurrency is the event source's MaxConcurrency prop, named
	// maxConcurrencyProp in error messages.
	maxConcurrency     *float64
	maxConcurrencyProp string
}

// NewLambdaConsumer defines a LambdaConsumer; it panics, failing synthesis,
// on invalid props.
func NewLambdaConsumer(scope constructs.Construct, id string, props *LambdaConsumerProps) *LambdaConsumer {
	if props == nil {
		props = &LambdaConsumerProps{}
	}
	if props.Queue == nil {
		errs := newPropErrors("LambdaConsumer", id)
		errs.add("Queue is required")
		errs.check()
	}
	return newLambdaConsumer(scope, id, props, newPropErrors("LambdaConsumer", id), []lambdaSource{{
		id: "SqsEventSource", queue: props.Queue,
		maxConcurrency: props.MaxConcurrency, maxConcurrencyProp: "MaxConcurrency",
	}})
}

// newLambdaConsumer defines the function of props (whose Queue and
// MaxConcurrency are ignored) with an event source mapping per source, on
// top of the errors errs has collected; it panics on invalid props.
func newLambdaConsumer(scope constructs.Construct, id string, props *LambdaConsumerProps, errs *propErrors, sources []lambdaSource) *LambdaConsumer {
	fifo := false
	for _, s := range sources {
		fifo = fifo || s.queue.Fifo
	}

	codeDir := DefaultCodeDir
	if props.CodeDir != nil {
		codeDir = *props.CodeDir
	}
	if fi, err := os.Stat(filepath.Join(codeDir, "bootstrap")); err != nil || fi.IsDir() {
		errs.add("CodeDir %q must hold the function's bootstrap executable (run `make lambda` at the repository root)", codeDir)
	}
	ts := errs.seconds("Timeout", props.Timeout, awscdk.Duration_Seconds(jsii.Number(DefaultFunctionTimeoutSec)))
	if known(ts) && (ts < 1 || ts > 900 || !isWhole(ts)) {
		errs.add("Timeout must be whole seconds from 1 second to 15 minutes, got %gs", ts)
	}
	window := 0.0
	if props.MaxBatchingWindow != nil {
		window = errs.seconds("MaxBatchingWindow", props.MaxBatchingWindow, nil)
		if fifo {
			errs.add("MaxBatchingWindow is not supported for a FIFO queue")
		} else if known(window) && (window < 0 || window > 300 || !isWhole(window)) {
			errs.add("MaxBatchingWindow must be whole seconds from 0 to 5 minutes, got %gs", window)
		}
	}
	for _, s := range sources {
		q := s.queue
		if need := VisibilityTimeoutFactor*ts + window; known(need) && !q.raiseVisibility(need) {
			fix := "raise JobQueueProps.VisibilityTimeout (or leave it out: the consumer then sets it)"
			if q.cfnQueue == nil {
				fix = "raise the existing queue's visibility timeout (and ExistingJobQueueProps.VisibilityTimeout)"
			}
			errs.add("%sthe queue's VisibilityTimeout (%gs) must be at least %d times Timeout (%gs) plus MaxBatchingWindow (%gs), i.e. >= %gs (at most 12 hours): %s, or lower Timeout",
				s.prefix, q.visibilitySeconds, VisibilityTimeoutFactor, ts, window, need, fix)
		}
		if known(q.MaxReceiveCount) && q.MaxReceiveCount < MinLambdaMaxReceiveCount {
			errs.add("%sthe queue's MaxReceiveCount (%g) must be at least %d with a Lambda consumer (AWS's advice): a throttled or failed invocation counts a receive of each message of its batch, which could dead-letter a message that never ran; raise JobQueueProps.MaxReceiveCount",
				s.prefix, q.MaxReceiveCount, MinLambdaMaxReceiveCount)
		}
	}
	memory := errs.number("MemorySize", props.MemorySize, DefaultMemorySize)
	if known(memory) && (memory < 128 || memory > 10240 || !isWhole(memory)) {
		errs.add("MemorySize must be a whole number of MiB from 128 to 10240, got %g", memory)
	}
	batch := errs.number("BatchSize", props.BatchSize, DefaultBatchSize)
	maxBatch := 10000.0
	if fifo {
		maxBatch = 10
	}
	if known(batch) && (batch < 1 || batch > maxBatch || !isWhole(batch)) {
		errs.add("BatchSize must be a whole number from 1 to %g for this queue, got %g", maxBatch, batch)
	}
	if known(batch) && known(window) && batch > 10 && window < 1 {
		errs.add("BatchSize above 10 (got %g) needs a MaxBatchingWindow of at least 1 second", batch)
	}
	// Each source's MaxConcurrency, and their sum: the most invocations
	// the event sources make at once, which reserved concurrency must
	// cover.
	maxConcs := make([]float64, len(sources))
	sum, capped := 0.0, true
	for i, s := range sources {
		if s.maxConcurrency == nil {
			capped = false
			continue
		}
		maxConcs[i] = errs.number(s.maxConcurrencyProp, s.maxConcurrency, 0)
		if m := maxConcs[i]; known(m) && (m < 2 || m > 1000 || !isWhole(m)) {
			errs.add("%s must be a whole number from 2 to 1000 (the event source's ScalingConfig), got %g", s.maxConcurrencyProp, m)
		}
		sum += maxConcs[i]
	}
	var reserved float64
	if props.ReservedConcurrency != nil {
		reserved = errs.number("ReservedConcurrency", props.ReservedConcurrency, 0)
		switch {
		case !known(reserved):
		case reserved < 0 || !isWhole(reserved):
			errs.add("ReservedConcurrency must be a whole number >= 0, got %g", reserved)
		case reserved == 0:
			errs.add("ReservedConcurrency 0 throttles every invocation while the event source goes on receiving, and each throttled batch spends a receive of its messages, which end in the dead-letter queue unrun; to pause the consumer, disable its event source mapping instead")
		case len(sources) == 1 && !capped:
			errs.add("ReservedConcurrency (%g) needs MaxConcurrency (from 2 to it): an uncapped event source scales its invocations past the reserved concurrency, and each throttled batch spends a receive of its messages, which end in the dead-letter queue unrun (for jobs one at a time, use a FIFO queue with one message group)", reserved)
		case len(sources) == 1 && known(sum) && reserved < sum:
			errs.add("ReservedConcurrency (%g) must be at least MaxConcurrency (%g): the event source would invoke more often than the function may run, and each throttled batch spends a receive of its messages", reserved, sum)
		case len(sources) > 1 && !capped:
			errs.add("ReservedConcurrency (%g) needs a MaxConcurrency on every level: an uncapped event source could take all of the reserved concurrency and throttle the others, and each throttled batch spends a receive of its messages", reserved)
		case len(sources) > 1 && known(sum) && reserved < sum:
			errs.add("ReservedConcurrency (%g) must be at least the sum of the levels' MaxConcurrency (%g): the event sources would invoke more often than the function may run, and each throttled batch spends a receive of its messages; raise it or lower the levels' MaxConcurrency", reserved, sum)
		}
	}
	if len(props.Filters) > 10 {
		errs.add("Filters holds %d patterns: an event source takes at most 10 (5 without a quota increase)", len(props.Filters))
	}
	for i, f := range props.Filters {
		if len(f) == 0 {
			errs.add("Filters[%d] is empty", i)
		}
		for _, k := range sortedKeys(f) {
			if k != "body" {
				errs.add("Filters[%d] has the key %q: SQS event sources filter on \"body\" only, and a pattern that matches no message makes Lambda delete every message", i, k)
			}
		}
	}
	if props.Vpc == nil && (props.VpcSubnets != nil || props.SecurityGroups != nil) {
		errs.add("VpcSubnets and SecurityGroups need Vpc")
	}
	for _, k := range slices.Sorted(maps.Keys(props.Environment)) {
		switch {
		case k == BatchingWindowEnv || k == MetricsNamespaceEnv || k == "IDEMPOTENCY_TABLE" && props.Table != nil:
			errs.add("Environment sets %s, which the construct sets from its props (the batching window the heartbeat counts from, the metrics' namespace, the idempotency table): set those props instead", k)
		case lambdaReservedEnv[k] || strings.HasPrefix(k, "AWS_LAMBDA_"):
			errs.add("Environment sets %s, which Lambda reserves: the deployment would fail", k)
		}
	}
	errs.check()

	c := &LambdaConsumer{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	retention := props.LogRetention
	if retention == "" {
		retention = awslogs.RetentionDays_ONE_MONTH
	}
	c.LogGroup = awslogs.NewLogGroup(c.Construct, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention:     retention,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	// A role of our own: the function's default one carries
	// AWSLambdaBasicExecutionRole, which may write to every log group of
	// the account.
	c.Role = awsiam.NewRole(c.Construct, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("Execution role of the sqsworker Lambda consumer " + pathOf(c.Construct)),
	})
	c.LogGroup.GrantWrite(c.Role)
	if props.Vpc != nil {
		c.Role.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid: jsii.String("LambdaNetworkInterfaces"),
			Actions: jsii.Strings("ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
				"ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"),
			Resources: jsii.Strings("*"),
		}))
	}

	first := sources[0].queue
	env := map[string]*string{MetricsNamespaceEnv: jsii.String(first.MetricsNamespace)}
	if window > 0 {
		env[BatchingWindowEnv] = jsii.String(goDuration(window))
	}
	if props.Table != nil {
		env["IDEMPOTENCY_TABLE"] = props.Table.Table.TableName()
	}
	for k, v := range props.Environment {
		env[k] = jsii.String(v)
	}
	var securityGroups *[]awsec2.ISecurityGroup
	if props.SecurityGroups != nil {
		securityGroups = &props.SecurityGroups
	}
	var reservedPtr *float64
	if props.ReservedConcurrency != nil {
		reservedPtr = jsii.Number(reserved)
	}
	c.Function = awslambda.NewFunction(c.Construct, jsii.String("Function"), &awslambda.FunctionProps{
		FunctionName:                 props.FunctionName,
		Runtime:                      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:                 awslambda.Architecture_ARM_64(),
		Handler:                      jsii.String("bootstrap"),
		Code:                         awslambda.Code_FromAsset(jsii.String(codeDir), nil),
		Timeout:                      awscdk.Duration_Seconds(jsii.Number(ts)),
		MemorySize:                   jsii.Number(memory),
		Environment:                  &env,
		LogGroup:                     c.LogGroup,
		Role:                         c.Role,
		ReservedConcurrentExecutions: reservedPtr,
		Tracing:                      props.Tracing,
		Vpc:                          props.Vpc,
		VpcSubnets:                   props.VpcSubnets,
		SecurityGroups:               securityGroups,
	})
	var filters *[]*map[string]any
	if len(props.Filters) > 0 {
		fs := make([]*map[string]any, len(props.Filters))
		for i, f := range props.Filters {
			f := f
			fs[i] = awslambda.FilterCriteria_Filter(&f)
		}
		filters = &fs
	}
	var windowDur awscdk.Duration
	if props.MaxBatchingWindow != nil {
		windowDur = awscdk.Duration_Seconds(jsii.Number(window))
	}
	for i, s := range sources {
		var maxConcPtr *float64
		if s.maxConcurrency != nil {
			maxConcPtr = jsii.Number(maxConcs[i])
		}
		esm := c.Function.AddEventSourceMapping(jsii.String(s.id), &awslambda.EventSourceMappingOptions{
			EventSourceArn:          s.queue.Queue.QueueArn(),
			BatchSize:               jsii.Number(batch),
			MaxBatchingWindow:       windowDur,
			MaxConcurrency:          maxConcPtr,
			ReportBatchItemFailures: jsii.Bool(true),
			Filters:                 filters,
		})
		c.EventSourceMappings = append(c.EventSourceMappings, esm)
		// The event source mapping polls with the function's role:
		// receive, delete, change visibility, get attributes (and
		// decrypt with a KMS queue). The runtime changes visibilities
		// too, and sends permanent failures and last attempts to the DLQ
		// with their failure metadata (lambda.Config), and sends waiting
		// copies of delayed jobs back to their queue (delays past SQS's
		// 15 minutes and backoffs past 12 hours).
		s.queue.Queue.GrantConsumeMessages(c.Role)
		s.queue.Queue.GrantSendMessages(c.Role)
		s.queue.DeadLetterQueue.GrantSendMessages(c.Role)
	}
	c.EventSourceMapping = c.EventSourceMappings[0]
	if props.Table != nil {
		props.Table.GrantStore(c.Role)
	}
	GrantEffects(c.Role, props.EffectTables...)

	fiveMinutes := &awscloudwatch.MetricOptions{Period: awscdk.Duration_Minutes(jsii.Number(5)), Statistic: jsii.String("Sum")}
	alarm := func(id, desc string, m awscloudwatch.Metric) awscloudwatch.Alarm {
		return awscloudwatch.NewAlarm(c.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(desc),
			Metric:             m,
			Threshold:          jsii.Number(0),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			// Lambda reports no data for a function that was not
			// invoked: no invocation, no error.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	if !props.DisableErrorAlarm {
		c.ErrorAlarm = alarm("ErrorAlarm", fmt.Sprintf("The function %s failed whole invocations (crash, timeout, out of memory): their batches come back after the visibility timeout, and each spends a receive.", pathOf(c.Construct)),
			c.Function.MetricErrors(fiveMinutes))
	}
	if !props.DisableThrottleAlarm {
		c.ThrottleAlarm = alarm("ThrottleAlarm", fmt.Sprintf("Invocations of the function %s were throttled: each throttled batch spends a receive of its messages. Raise the reserved or account concurrency, or lower MaxConcurrency.", pathOf(c.Construct)),
			c.Function.MetricThrottles(fiveMinutes))
	}
	topic := props.AlarmTopic
	if topic == nil {
		topic = first.AlarmTopic
	}
	notify(topic, c.ErrorAlarm, c.ThrottleAlarm)
	return c
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
