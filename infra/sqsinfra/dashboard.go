package sqsinfra

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// DashboardProps configures a Dashboard. Queue is required.
type DashboardProps struct {
	// Queue is the job queue to show. Required.
	Queue *JobQueue
	// QueueName is the queue dimension of the runtimes' metrics: the
	// queue's name (metrics.QueueName of its URL). Default: the queue's
	// name.
	QueueName *string
	// Namespace is the CloudWatch namespace of the runtimes' EMF metrics.
	// Default: the queue's MetricsNamespace.
	Namespace *string
	// HandlerName is the handler dimension of the handler_duration graph
	// (worker.Config.HandlerName, `sqsworker run --handler-name`; on
	// Lambda the function's name). Default: Consumer's function name with
	// a Consumer and no Poller, else "handler".
	HandlerName *string
	// Consumer, when set, adds its Lambda function's errors, throttles and
	// duration. Default nil.
	Consumer *LambdaConsumer
	// Poller, when set, adds its backlog per task against the scaling
	// target, running and desired tasks, and CPU and memory utilization.
	// Default nil.
	Poller *PollerService
	// DashboardName is the dashboard's name. Default: generated.
	DashboardName *string
	// Period of the graphs, whole minutes. Default 1 minute.
	Period awscdk.Duration
}

// Dashboard is a CloudWatch dashboard of a job system: the queue's depth
// and age of oldest message (against the latency budget), the dead-letter
// queue's depth, throughput (messages received and deleted), failures by
// error class and handler latency (p50, p99) and the circuit breaker's
// state, openings and probes from the runtimes' EMF metrics; a
// PollerService's backlog per task (against its target), tasks, CPU and
// memory; a Lambda consumer's errors, throttles and duration.
type Dashboard struct {
	// Construct is the scope of the resources below.
	Construct constructs.Construct
	// Dashboard is the CloudWatch dashboard.
	Dashboard awscloudwatch.Dashboard
	// FailuresByErrorClass is the SEARCH expression of the failures graph.
	FailuresByErrorClass string
}

// NewDashboard defines a Dashboard; it panics, failing synthesis, on
// invalid props.
func NewDashboard(scope constructs.Construct, id string, props *DashboardProps) *Dashboard {
	if props == nil {
		props = &DashboardProps{}
	}
	errs := newPropErrors("Dashboard", id)
	if props.Queue == nil {
		errs.add("Queue is required")
		errs.check()
	}
	q := props.Queue
	ns := q.MetricsNamespace
	if props.Namespace != nil {
		ns = *props.Namespace
		if ns == "" || *awscdk.Token_IsUnresolved(props.Namespace) {
			errs.add("Namespace must be a literal, non-empty namespace, got %q", ns)
		}
	}
	handler := jsii.String(DefaultHandlerName)
	switch {
	case props.HandlerName != nil:
		handler = props.HandlerName
	case props.Consumer != nil && props.Poller == nil:
		// The Lambda runtime's handler dimension is its function's name.
		handler = props.Consumer.Function.FunctionName()
	}
	ps := errs.seconds("Period", props.Period, awscdk.Duration_Minutes(jsii.Number(1)))
	if known(ps) && (ps < 60 || !isWhole(ps/60)) {
		errs.add("Period must be a whole number of minutes, got %gs", ps)
	}
	errs.check()

	period := awscdk.Duration_Seconds(jsii.Number(ps))
	queueName := q.QueueNameDimension()
	if props.QueueName != nil {
		queueName = props.QueueName
	}
	c := &Dashboard{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Dashboard = awscloudwatch.NewDashboard(c.Construct, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName:   props.DashboardName,
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
	opts := func(stat, label string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String(stat), Label: jsii.String(label)}
	}
	type line struct {
		value float64
		label string
	}
	graph := func(title string, left []awscloudwatch.IMetric, right []awscloudwatch.IMetric, lines ...line) awscloudwatch.GraphWidget {
		p := &awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: &left, Width: jsii.Number(8), Height: jsii.Number(6),
		}
		if len(right) > 0 {
			p.Right = &right
		}
		if len(lines) > 0 {
			anns := make([]*awscloudwatch.HorizontalAnnotation, len(lines))
			for i, l := range lines {
				anns[i] = &awscloudwatch.HorizontalAnnotation{Value: jsii.Number(l.value), Label: jsii.String(l.label)}
			}
			p.LeftAnnotations = &anns
		}
		return awscloudwatch.NewGraphWidget(p)
	}
	runtime := func(name, stat, label string, dims map[string]*string) awscloudwatch.IMetric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String(ns), MetricName: jsii.String(name), DimensionsMap: &dims,
			Period: period, Statistic: jsii.String(stat), Label: jsii.String(label),
		})
	}
	// Every handler of the queue (the poller's, and a Lambda function's,
	// named after the function), a line per handler and error class.
	c.FailuresByErrorClass = fmt.Sprintf(`SEARCH('{%s,queue,handler,error_class} MetricName="messages_failed" queue="%s"', 'Sum', %g)`,
		ns, *queueName, ps)
	qh := map[string]*string{"queue": queueName, "handler": handler}
	qd := map[string]*string{"queue": queueName}
	budget := durationSeconds(q.LatencyBudget)

	c.Dashboard.AddWidgets(
		graph("Queue depth", []awscloudwatch.IMetric{
			q.Queue.MetricApproximateNumberOfMessagesVisible(opts("Maximum", "visible")),
			q.Queue.MetricApproximateNumberOfMessagesNotVisible(opts("Maximum", "in flight")),
		}, nil),
		graph("Age of oldest message (s)", []awscloudwatch.IMetric{
			q.Queue.MetricApproximateAgeOfOldestMessage(opts("Maximum", "oldest")),
		}, nil, line{budget, "latency budget"}),
		graph("Dead-letter queue", []awscloudwatch.IMetric{
			q.DeadLetterQueue.MetricApproximateNumberOfMessagesVisible(opts("Maximum", "DLQ visible")),
		}, []awscloudwatch.IMetric{
			q.DeadLetterQueue.MetricNumberOfMessagesSent(opts("Sum", "sent to the DLQ by a runtime")),
		}),
	)
	c.Dashboard.AddWidgets(
		graph("Throughput", []awscloudwatch.IMetric{
			q.Queue.MetricNumberOfMessagesReceived(opts("Sum", "received")),
			q.Queue.MetricNumberOfMessagesDeleted(opts("Sum", "deleted")),
		}, nil),
		graph("Failures by error class", []awscloudwatch.IMetric{
			awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression: jsii.String(c.FailuresByErrorClass), Period: period, Label: jsii.String(""),
			}),
		}, nil),
		graph("Handler duration (s)", []awscloudwatch.IMetric{
			runtime("handler_duration", "p50", "p50", qh),
			runtime("handler_duration", "p99", "p99", qh),
		}, nil),
	)
	c.Dashboard.AddWidgets(
		graph("Circuit breaker", []awscloudwatch.IMetric{
			runtime("breaker_state", "Maximum", "state (0 closed, 1 open, 2 half-open)", qd),
		}, []awscloudwatch.IMetric{
			runtime("breaker_opens", "Sum", "openings", qd),
			runtime("breaker_probes", "Sum", "probes", qd),
		}, line{1, "open"}),
		graph("Leases lost and copies not sent", []awscloudwatch.IMetric{
			runtime("leases_lost", "Sum", "leases lost (may run again)", qd),
			runtime("requeue_failures", "Sum", "waiting copies not sent", qd),
		}, nil),
	)
	if p := props.Poller; p != nil {
		backlog := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression:   jsii.String(p.BacklogPerTaskExpression),
			UsingMetrics: p.backlogMetrics(period),
			Label:        jsii.String("visible messages per running task"), Period: period,
		})
		c.Dashboard.AddWidgets(
			graph("Backlog per task", []awscloudwatch.IMetric{backlog}, nil, line{p.BacklogPerTaskTarget, "scaling target"}),
			graph("Tasks", []awscloudwatch.IMetric{
				p.RunningTaskMetric("Average", period),
				p.DesiredTaskMetric("Average", period),
				p.serviceMetric("PendingTaskCount", "Average", "pending tasks", period),
			}, nil),
			graph("CPU and memory (%)", []awscloudwatch.IMetric{
				p.Service.MetricCpuUtilization(opts("Average", "CPU")),
				p.Service.MetricMemoryUtilization(opts("Average", "memory")),
			}, nil),
		)
	}
	if f := props.Consumer; f != nil {
		c.Dashboard.AddWidgets(
			graph("Lambda errors and throttles", []awscloudwatch.IMetric{
				f.Function.MetricErrors(opts("Sum", "errors")),
				f.Function.MetricThrottles(opts("Sum", "throttles")),
			}, nil),
			graph("Lambda duration", []awscloudwatch.IMetric{
				f.Function.MetricDuration(opts("p50", "p50")),
				f.Function.MetricDuration(opts("p99", "p99")),
			}, nil),
		)
	}
	return c
}
