package sqsinfra

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Defaults of DashboardProps: the worker's metrics.EMF namespace and
// worker.Config.HandlerName.
const (
	DefaultMetricsNamespace = "sqsworker"
	DefaultHandlerName      = "handler"
)

// DashboardProps configures a Dashboard. Queue is required.
type DashboardProps struct {
	// Queue is the job queue to show. Required.
	Queue *JobQueue
	// QueueName is the queue dimension of the worker's metrics: the
	// queue's name (metrics.QueueName of its URL). Default: the queue's
	// name.
	QueueName *string
	// Namespace is the CloudWatch namespace of the worker's EMF metrics
	// (metrics.NewEMF). Default "sqsworker".
	Namespace *string
	// HandlerName is the handler dimension of the worker's metrics
	// (worker.Config.HandlerName). Default "handler".
	HandlerName *string
	// Consumer, when set, adds its Lambda function's errors, throttles and
	// duration. Default nil.
	Consumer *LambdaConsumer
	// DashboardName is the dashboard's name. Default: generated.
	DashboardName *string
	// Period of the graphs. Default 1 minute.
	Period awscdk.Duration
}

// Dashboard is a CloudWatch dashboard of a job system: the queue's depth
// and age of oldest message, the dead-letter queue's depth, throughput
// (messages received and deleted), failures by error class and handler
// latency (p50, p99) from the worker's EMF metrics, and a Lambda
// consumer's errors and throttles.
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
	}
	ns := DefaultMetricsNamespace
	if props.Namespace != nil {
		ns = *props.Namespace
		if ns == "" {
			errs.add("Namespace must not be empty")
		}
	}
	handler := DefaultHandlerName
	if props.HandlerName != nil {
		handler = *props.HandlerName
	}
	period := orDuration(props.Period, awscdk.Duration_Minutes(jsii.Number(1)))
	if s := seconds(period); s < 60 || !isWhole(s/60) {
		errs.add("Period must be a whole number of minutes, got %gs", s)
	}
	errs.check()

	q := props.Queue
	queueName := q.Queue.QueueName()
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
	graph := func(title string, left []awscloudwatch.IMetric) awscloudwatch.GraphWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: &left, Width: jsii.Number(8), Height: jsii.Number(6),
		})
	}
	worker := func(name, stat, label string, dims map[string]*string) awscloudwatch.IMetric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String(ns), MetricName: jsii.String(name), DimensionsMap: &dims,
			Period: period, Statistic: jsii.String(stat), Label: jsii.String(label),
		})
	}
	c.FailuresByErrorClass = fmt.Sprintf(`SEARCH('{%s,queue,handler,error_class} MetricName="messages_failed" queue="%s" handler="%s"', 'Sum', %g)`,
		ns, *queueName, handler, seconds(period))
	qh := map[string]*string{"queue": queueName, "handler": jsii.String(handler)}

	c.Dashboard.AddWidgets(
		graph("Queue depth", []awscloudwatch.IMetric{
			q.Queue.MetricApproximateNumberOfMessagesVisible(opts("Maximum", "visible")),
			q.Queue.MetricApproximateNumberOfMessagesNotVisible(opts("Maximum", "in flight")),
		}),
		graph("Age of oldest message (s)", []awscloudwatch.IMetric{
			q.Queue.MetricApproximateAgeOfOldestMessage(opts("Maximum", "oldest")),
		}),
		graph("Dead-letter queue", []awscloudwatch.IMetric{
			q.DeadLetterQueue.MetricApproximateNumberOfMessagesVisible(opts("Maximum", "DLQ visible")),
		}),
	)
	c.Dashboard.AddWidgets(
		graph("Throughput", []awscloudwatch.IMetric{
			q.Queue.MetricNumberOfMessagesReceived(opts("Sum", "received")),
			q.Queue.MetricNumberOfMessagesDeleted(opts("Sum", "deleted")),
		}),
		graph("Failures by error class", []awscloudwatch.IMetric{
			awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				Expression: jsii.String(c.FailuresByErrorClass), Period: period, Label: jsii.String(""),
			}),
		}),
		graph("Handler duration", []awscloudwatch.IMetric{
			worker("handler_duration", "p50", "p50", qh),
			worker("handler_duration", "p99", "p99", qh),
		}),
	)
	if f := props.Consumer; f != nil {
		c.Dashboard.AddWidgets(
			graph("Lambda errors and throttles", []awscloudwatch.IMetric{
				f.Function.MetricErrors(opts("Sum", "errors")),
				f.Function.MetricThrottles(opts("Sum", "throttles")),
			}),
			graph("Lambda duration", []awscloudwatch.IMetric{
				f.Function.MetricDuration(opts("p50", "p50")),
				f.Function.MetricDuration(opts("p99", "p99")),
			}),
		)
	}
	return c
}
