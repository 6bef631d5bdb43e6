package sqsinfra

import (
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// DefaultCodeDir is the default LambdaConsumerProps.CodeDir: where the
// repository's `make lambda` puts the arm64 bootstrap, relative to infra/
// (where cdk.json is, and so where `cdk synth` runs the app).
const DefaultCodeDir = "../bin/lambda/arm64"

// VisibilityTimeoutFactor is how many function timeouts the queue's
// visibility timeout must at least be: AWS's rule for SQS event sources.
const VisibilityTimeoutFactor = 6

// Defaults of LambdaConsumerProps.
const (
	DefaultBatchSize  = 10
	DefaultMemorySize = 256
)

// LambdaConsumerProps configures a LambdaConsumer. Queue is required.
type LambdaConsumerProps struct {
	// Queue is the job queue to consume. Required. Its visibility timeout
	// must be at least VisibilityTimeoutFactor (6) times Timeout.
	Queue *JobQueue
	// Table, when set, is the idempotency table the function may read and
	// write; its name is in the environment as IDEMPOTENCY_TABLE. Default
	// nil.
	Table *IdempotencyTable

	// CodeDir is the directory holding the function's `bootstrap`
	// executable (linux/arm64, built by `make lambda`). Default
	// "../bin/lambda/arm64" (DefaultCodeDir).
	CodeDir *string
	// FunctionName is the function's physical name. Default: generated.
	FunctionName *string
	// Timeout is the function timeout, between 1 second and 15 minutes.
	// Default 30 seconds.
	Timeout awscdk.Duration
	// MemorySize in MiB, between 128 and 10240. Default 256.
	MemorySize *float64
	// Environment is added to the function's environment. Default none.
	Environment map[string]string
	// LogRetention is how long the function's log group keeps logs.
	// Default one month.
	LogRetention awslogs.RetentionDays

	// BatchSize is the most records per invocation: 1 to 10 for a FIFO
	// queue, 1 to 10000 otherwise (above 10 needs MaxBatchingWindow).
	// Default 10.
	BatchSize *float64
	// MaxBatchingWindow is how long the event source gathers records
	// before invoking, up to 5 minutes; not for FIFO queues. Default none.
	MaxBatchingWindow awscdk.Duration
	// MaxConcurrency caps the concurrent invocations that the event source
	// makes, 2 to 1000. Default nil: no cap.
	MaxConcurrency *float64
}

// LambdaConsumer is a Go function (provided.al2023, arm64) consuming a
// JobQueue through an SQS event source with ReportBatchItemFailures. It may
// receive, delete and change the visibility of the queue's messages, send to
// its dead-letter queue (permanent failures), and read and write the
// idempotency table.
type LambdaConsumer struct {
	// Construct is the scope of the resources below. (A jsii construct
	// cannot be embedded in a Go struct passed back to jsii.)
	Construct constructs.Construct
	// Function is the Lambda function.
	Function awslambda.Function
	// EventSource is the SQS event source mapping's source.
	EventSource awslambdaeventsources.SqsEventSource
	// LogGroup is the function's log group.
	LogGroup awslogs.LogGroup
}

// NewLambdaConsumer defines a LambdaConsumer; it panics, failing synthesis,
// on invalid props.
func NewLambdaConsumer(scope constructs.Construct, id string, props *LambdaConsumerProps) *LambdaConsumer {
	if props == nil {
		props = &LambdaConsumerProps{}
	}
	errs := newPropErrors("LambdaConsumer", id)
	if props.Queue == nil {
		errs.add("Queue is required")
		errs.check()
	}
	q := props.Queue
	fifo := q.Queue.Fifo() != nil && *q.Queue.Fifo()

	codeDir := DefaultCodeDir
	if props.CodeDir != nil {
		codeDir = *props.CodeDir
	}
	if fi, err := os.Stat(filepath.Join(codeDir, "bootstrap")); err != nil || fi.IsDir() {
		errs.add("CodeDir %q must hold the function's bootstrap executable (run `make lambda` at the repository root)", codeDir)
	}
	timeout := orDuration(props.Timeout, awscdk.Duration_Seconds(jsii.Number(30)))
	ts := seconds(timeout)
	if ts < 1 || ts > 900 {
		errs.add("Timeout must be between 1 second and 15 minutes, got %gs", ts)
	}
	if vs := seconds(q.VisibilityTimeout); vs < VisibilityTimeoutFactor*ts {
		errs.add("the queue's VisibilityTimeout (%gs) must be at least %d times Timeout (%gs), i.e. >= %gs: raise JobQueueProps.VisibilityTimeout or lower Timeout",
			vs, VisibilityTimeoutFactor, ts, VisibilityTimeoutFactor*ts)
	}
	memory := orNumber(props.MemorySize, DefaultMemorySize)
	if memory < 128 || memory > 10240 || !isWhole(memory) {
		errs.add("MemorySize must be a whole number of MiB between 128 and 10240, got %g", memory)
	}
	batch := orNumber(props.BatchSize, DefaultBatchSize)
	maxBatch := 10000.0
	if fifo {
		maxBatch = 10
	}
	if batch < 1 || batch > maxBatch || !isWhole(batch) {
		errs.add("BatchSize must be a whole number between 1 and %g for this queue, got %g", maxBatch, batch)
	}
	if w := props.MaxBatchingWindow; w != nil {
		if fifo {
			errs.add("MaxBatchingWindow is not supported for a FIFO queue")
		} else if s := seconds(w); s < 0 || s > 300 {
			errs.add("MaxBatchingWindow must be between 0 and 5 minutes, got %gs", s)
		}
	}
	if batch > 10 && (props.MaxBatchingWindow == nil || seconds(props.MaxBatchingWindow) < 1) {
		errs.add("BatchSize above 10 (got %g) needs a MaxBatchingWindow of at least 1 second", batch)
	}
	if mc := props.MaxConcurrency; mc != nil && (*mc < 2 || *mc > 1000 || !isWhole(*mc)) {
		errs.add("MaxConcurrency must be a whole number between 2 and 1000, got %g", *mc)
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
	env := map[string]*string{}
	for k, v := range props.Environment {
		env[k] = jsii.String(v)
	}
	if props.Table != nil {
		env["IDEMPOTENCY_TABLE"] = props.Table.Table.TableName()
	}
	c.Function = awslambda.NewFunction(c.Construct, jsii.String("Function"), &awslambda.FunctionProps{
		FunctionName: props.FunctionName,
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         awslambda.Code_FromAsset(jsii.String(codeDir), nil),
		Timeout:      timeout,
		MemorySize:   jsii.Number(memory),
		Environment:  &env,
		LogGroup:     c.LogGroup,
	})
	c.EventSource = awslambdaeventsources.NewSqsEventSource(q.Queue, &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(batch),
		MaxBatchingWindow:       props.MaxBatchingWindow,
		MaxConcurrency:          props.MaxConcurrency,
		ReportBatchItemFailures: jsii.Bool(true),
	})
	c.Function.AddEventSource(c.EventSource)
	// Permanent failures and last attempts are sent to the DLQ with their
	// failure metadata by the runtime itself (lambda.Config).
	q.DeadLetterQueue.GrantSendMessages(c.Function)
	if props.Table != nil {
		props.Table.Table.GrantReadWriteData(c.Function)
	}
	return c
}
