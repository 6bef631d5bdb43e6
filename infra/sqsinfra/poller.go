package sqsinfra

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapplicationautoscaling"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Defaults of PollerServiceProps.
const (
	// DefaultImageDir is the build context of the worker image, relative
	// to infra/ (where `cdk` runs the app): the repository root.
	DefaultImageDir = ".."
	// DefaultDockerfile is the worker image's Dockerfile, relative to the
	// build context.
	DefaultDockerfile = "Dockerfile"
	// DefaultHandlerURL is where the image's `sqsworker run --http` POSTs
	// each message: a handler container listening on port 8080 of the same
	// task (containers of a Fargate task share localhost).
	DefaultHandlerURL = "http://127.0.0.1:8080/jobs"

	DefaultPollerCPU          = 256
	DefaultPollerMemory       = 512
	DefaultDesiredTasks       = 1
	DefaultMinTasks           = 1
	DefaultMaxTasks           = 10
	DefaultBacklogPerTask     = 100
	DefaultShutdownTimeoutSec = 25 // worker.Config.ShutdownTimeout's default
	DefaultStopTimeoutSec     = 30 // ECS's default stop timeout
	// StopTimeoutMargin is how much longer than the worker's shutdown
	// timeout the container's stop timeout must be: time to make unstarted
	// messages visible again and send the pending deletes after the
	// handlers are done.
	StopTimeoutMargin = 5
)

// PollerServiceProps configures a PollerService. Queue is required.
type PollerServiceProps struct {
	// Queue is the job queue to consume. Required.
	Queue *JobQueue
	// Table, when set, is the idempotency table the tasks may read and
	// write; its name is in the environment as IDEMPOTENCY_TABLE. Default
	// nil.
	Table *IdempotencyTable

	// Cluster is the ECS cluster to run in. Default: a new cluster, with
	// Container Insights on, in Vpc. (Backlog-per-task scaling reads the
	// service's RunningTaskCount from Container Insights: a given cluster
	// must have it on.)
	Cluster awsecs.ICluster
	// Vpc is the VPC of the new cluster; not with Cluster. Default: a new
	// VPC over two availability zones with one NAT gateway and flow logs
	// to CloudWatch Logs.
	Vpc awsec2.IVpc

	// Image is the worker container's image. Default: built at deploy time
	// (`cdk deploy`; synthesis needs no Docker) from Dockerfile in
	// ImageDir, linux/arm64.
	Image awsecs.ContainerImage
	// ImageDir is the Docker build context of the default image. Default
	// ".." (DefaultImageDir): the repository root, seen from infra/.
	ImageDir *string
	// Dockerfile is the default image's Dockerfile, relative to ImageDir.
	// Default "Dockerfile" (DefaultDockerfile).
	Dockerfile *string
	// Command is the container's command. Default: the image's sqsworker
	// CLI, `run QUEUE_URL --http HandlerURL --metrics emf` (EMF on stdout,
	// which the awslogs driver ships and the Dashboard graphs).
	Command []string
	// HandlerURL is the endpoint the default Command POSTs each message
	// to; add the handler's container to TaskDefinition. Default
	// "http://127.0.0.1:8080/jobs" (DefaultHandlerURL).
	HandlerURL *string
	// Environment is added to the container's environment, after
	// QUEUE_URL, DEAD_LETTER_QUEUE_URL and IDEMPOTENCY_TABLE. Default none.
	Environment map[string]string

	// CPU is the task's CPU units (256, 512, 1024, 2048, 4096, 8192 or
	// 16384). Default 256.
	CPU *float64
	// MemoryMiB is the task's memory, valid for CPU on Fargate. Default
	// 512.
	MemoryMiB *float64

	// DesiredTasks is the initial number of tasks, between MinTasks and
	// MaxTasks. Default 1.
	DesiredTasks *float64
	// MinTasks is the fewest tasks scaling leaves, >= 1 (the backlog per
	// task divides by the running tasks, so it needs one). Default 1.
	MinTasks *float64
	// MaxTasks is the most tasks scaling starts, >= MinTasks. Default 10.
	MaxTasks *float64
	// BacklogPerTask is the target of the scaling policy: visible messages
	// per running task (the acceptable latency divided by the time to
	// process a message, in AWS's guidance). Must be > 0. Default 100.
	BacklogPerTask *float64
	// ScaleInCooldown and ScaleOutCooldown space scaling activities.
	// Default 5 minutes and 1 minute.
	ScaleInCooldown  awscdk.Duration
	ScaleOutCooldown awscdk.Duration

	// ShutdownTimeout is the worker's worker.Config.ShutdownTimeout (the
	// CLI's is 25s). Default 25 seconds.
	ShutdownTimeout awscdk.Duration
	// StopTimeout is how long ECS waits after SIGTERM before SIGKILL, at
	// most 120 seconds (Fargate's limit) and at least ShutdownTimeout + 5s
	// (StopTimeoutMargin). Default 30 seconds.
	StopTimeout awscdk.Duration

	// LogRetention is how long the container's log group keeps logs.
	// Default one month.
	LogRetention awslogs.RetentionDays
}

// PollerService is an ECS Fargate service running the sqsworker image on a
// JobQueue, scaled on the backlog per task: the queue's visible messages
// divided by the service's running tasks, AWS's recommended metric for
// queue workers. Its task role may receive, delete, change the visibility
// of and read the attributes of the queue's messages, send to its
// dead-letter queue, and read and write the idempotency table.
type PollerService struct {
	// Construct is the scope of the resources below. (A jsii construct
	// cannot be embedded in a Go struct passed back to jsii.)
	Construct constructs.Construct
	// Cluster is the cluster the service runs in.
	Cluster awsecs.ICluster
	// TaskDefinition is the Fargate task definition; add a handler
	// container with AddContainer.
	TaskDefinition awsecs.FargateTaskDefinition
	// Container is the worker container.
	Container awsecs.ContainerDefinition
	// Service is the Fargate service.
	Service awsecs.FargateService
	// LogGroup is the container's log group.
	LogGroup awslogs.LogGroup
	// ScalableTarget is the service's desired count between MinTasks and
	// MaxTasks.
	ScalableTarget awsapplicationautoscaling.ScalableTarget
	// ScalingPolicy is the target-tracking policy on the backlog per task.
	ScalingPolicy awsapplicationautoscaling.CfnScalingPolicy
	// BacklogPerTaskExpression is the scaling policy's metric math.
	BacklogPerTaskExpression string
}

var fargateCPU = map[float64][2]float64{ // CPU units: memory MiB range
	256: {512, 2048}, 512: {1024, 4096}, 1024: {2048, 8192}, 2048: {4096, 16384},
	4096: {8192, 30720}, 8192: {16384, 61440}, 16384: {32768, 122880},
}

// NewPollerService defines a PollerService; it panics, failing synthesis,
// on invalid props.
func NewPollerService(scope constructs.Construct, id string, props *PollerServiceProps) *PollerService {
	if props == nil {
		props = &PollerServiceProps{}
	}
	errs := newPropErrors("PollerService", id)
	if props.Queue == nil {
		errs.add("Queue is required")
		errs.check()
	}
	if props.Cluster != nil && props.Vpc != nil {
		errs.add("Vpc is for a new cluster: give Cluster or Vpc, not both")
	}
	if props.Image != nil && (props.ImageDir != nil || props.Dockerfile != nil) {
		errs.add("ImageDir and Dockerfile are for the default image: give Image or them, not both")
	}
	cpu := orNumber(props.CPU, DefaultPollerCPU)
	mem := orNumber(props.MemoryMiB, DefaultPollerMemory)
	if r, ok := fargateCPU[cpu]; !ok {
		errs.add("CPU must be one of 256, 512, 1024, 2048, 4096, 8192, 16384, got %g", cpu)
	} else if mem < r[0] || mem > r[1] || !isWhole(mem) {
		errs.add("MemoryMiB must be between %g and %g for CPU %g, got %g", r[0], r[1], cpu, mem)
	}
	minTasks := orNumber(props.MinTasks, DefaultMinTasks)
	maxTasks := orNumber(props.MaxTasks, DefaultMaxTasks)
	desired := orNumber(props.DesiredTasks, DefaultDesiredTasks)
	if minTasks < 1 || !isWhole(minTasks) {
		errs.add("MinTasks must be a whole number >= 1 (the backlog per task divides by the running tasks), got %g", minTasks)
	}
	if !isWhole(maxTasks) || maxTasks < minTasks {
		errs.add("MaxTasks must be a whole number >= MinTasks (%g), got %g", minTasks, maxTasks)
	}
	if !isWhole(desired) || desired < minTasks || desired > maxTasks {
		errs.add("DesiredTasks must be a whole number between MinTasks (%g) and MaxTasks (%g), got %g", minTasks, maxTasks, desired)
	}
	backlog := orNumber(props.BacklogPerTask, DefaultBacklogPerTask)
	if backlog <= 0 {
		errs.add("BacklogPerTask must be > 0, got %g", backlog)
	}
	shutdown := orDuration(props.ShutdownTimeout, awscdk.Duration_Seconds(jsii.Number(DefaultShutdownTimeoutSec)))
	stop := orDuration(props.StopTimeout, awscdk.Duration_Seconds(jsii.Number(DefaultStopTimeoutSec)))
	ss, st := seconds(shutdown), seconds(stop)
	if ss < 0 {
		errs.add("ShutdownTimeout must not be negative, got %gs", ss)
	}
	if st > 120 {
		errs.add("StopTimeout must be at most 120 seconds (Fargate's limit), got %gs", st)
	}
	if st < ss+StopTimeoutMargin {
		errs.add("StopTimeout (%gs) must be at least ShutdownTimeout (%gs) + %ds, i.e. >= %gs, or ECS kills the worker before its handlers finish: raise StopTimeout or lower ShutdownTimeout",
			st, ss, StopTimeoutMargin, ss+StopTimeoutMargin)
	}
	scaleIn := orDuration(props.ScaleInCooldown, awscdk.Duration_Minutes(jsii.Number(5)))
	scaleOut := orDuration(props.ScaleOutCooldown, awscdk.Duration_Minutes(jsii.Number(1)))
	errs.check()

	q := props.Queue
	c := &PollerService{Construct: constructs.NewConstruct(scope, jsii.String(id))}

	c.Cluster = props.Cluster
	if c.Cluster == nil {
		vpc := props.Vpc
		if vpc == nil {
			vpc = awsec2.NewVpc(c.Construct, jsii.String("Vpc"), &awsec2.VpcProps{
				MaxAzs:      jsii.Number(2),
				NatGateways: jsii.Number(1),
				FlowLogs: &map[string]*awsec2.FlowLogOptions{
					"FlowLogs": {TrafficType: awsec2.FlowLogTrafficType_REJECT},
				},
			})
		}
		c.Cluster = awsecs.NewCluster(c.Construct, jsii.String("Cluster"), &awsecs.ClusterProps{
			Vpc:                 vpc,
			ContainerInsightsV2: awsecs.ContainerInsights_ENABLED,
		})
	}

	c.TaskDefinition = awsecs.NewFargateTaskDefinition(c.Construct, jsii.String("TaskDefinition"), &awsecs.FargateTaskDefinitionProps{
		Cpu:            jsii.Number(cpu),
		MemoryLimitMiB: jsii.Number(mem),
		RuntimePlatform: &awsecs.RuntimePlatform{
			CpuArchitecture:       awsecs.CpuArchitecture_ARM64(),
			OperatingSystemFamily: awsecs.OperatingSystemFamily_LINUX(),
		},
	})

	image := props.Image
	if image == nil {
		dir, file := DefaultImageDir, DefaultDockerfile
		if props.ImageDir != nil {
			dir = *props.ImageDir
		}
		if props.Dockerfile != nil {
			file = *props.Dockerfile
		}
		image = awsecs.ContainerImage_FromAsset(jsii.String(dir), &awsecs.AssetImageProps{
			File:     jsii.String(file),
			Platform: awsecrassets.Platform_LINUX_ARM64(),
		})
	}
	retention := props.LogRetention
	if retention == "" {
		retention = awslogs.RetentionDays_ONE_MONTH
	}
	c.LogGroup = awslogs.NewLogGroup(c.Construct, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention:     retention,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	env := map[string]*string{
		"QUEUE_URL":             q.Queue.QueueUrl(),
		"DEAD_LETTER_QUEUE_URL": q.DeadLetterQueue.QueueUrl(),
	}
	if props.Table != nil {
		env["IDEMPOTENCY_TABLE"] = props.Table.Table.TableName()
	}
	for k, v := range props.Environment {
		env[k] = jsii.String(v)
	}
	var command []*string
	if props.Command != nil {
		command = *jsii.Strings(props.Command...)
	} else {
		handler := DefaultHandlerURL
		if props.HandlerURL != nil {
			handler = *props.HandlerURL
		}
		command = []*string{jsii.String("run"), q.Queue.QueueUrl(), jsii.String("--http"), jsii.String(handler),
			jsii.String("--metrics"), jsii.String("emf")}
	}
	c.Container = c.TaskDefinition.AddContainer(jsii.String("Worker"), &awsecs.ContainerDefinitionOptions{
		Image:                  image,
		Command:                &command,
		Environment:            &env,
		StopTimeout:            stop,
		Essential:              jsii.Bool(true),
		ReadonlyRootFilesystem: jsii.Bool(true),
		Logging: awsecs.LogDrivers_AwsLogs(&awsecs.AwsLogDriverProps{
			StreamPrefix: jsii.String("worker"),
			LogGroup:     c.LogGroup,
			Mode:         awsecs.AwsLogDriverMode_NON_BLOCKING,
		}),
	})

	c.Service = awsecs.NewFargateService(c.Construct, jsii.String("Service"), &awsecs.FargateServiceProps{
		Cluster:           c.Cluster,
		TaskDefinition:    c.TaskDefinition,
		DesiredCount:      jsii.Number(desired),
		MinHealthyPercent: jsii.Number(100),
		MaxHealthyPercent: jsii.Number(200),
		CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Rollback: jsii.Bool(true)},
		// The worker only makes outbound calls.
		AssignPublicIp: jsii.Bool(false),
	})

	role := c.TaskDefinition.TaskRole()
	// Receive, delete, change visibility, get attributes (redrive policy,
	// depth) on the queue; send permanent failures to the dead-letter
	// queue, whose depth the worker also reads.
	q.Queue.GrantConsumeMessages(role)
	q.DeadLetterQueue.GrantSendMessages(role)
	if props.Table != nil {
		props.Table.Table.GrantReadWriteData(role)
	}

	c.ScalableTarget = awsapplicationautoscaling.NewScalableTarget(c.Construct, jsii.String("ScalableTarget"), &awsapplicationautoscaling.ScalableTargetProps{
		ServiceNamespace:  awsapplicationautoscaling.ServiceNamespace_ECS,
		ResourceId:        jsii.String(fmt.Sprintf("service/%s/%s", *c.Cluster.ClusterName(), *c.Service.ServiceName())),
		ScalableDimension: jsii.String("ecs:service:DesiredCount"),
		MinCapacity:       jsii.Number(minTasks),
		MaxCapacity:       jsii.Number(maxTasks),
	})
	// The L2 target tracking policy takes a single metric only; backlog per
	// task needs metric math, which CloudFormation's target tracking
	// (CustomizedMetricSpecification.Metrics) supports: so an L1 policy.
	c.BacklogPerTaskExpression = "visible / running"
	dim := func(n string, v *string) *awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDimensionProperty {
		return &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDimensionProperty{Name: jsii.String(n), Value: v}
	}
	c.ScalingPolicy = awsapplicationautoscaling.NewCfnScalingPolicy(c.Construct, jsii.String("BacklogPerTaskScaling"), &awsapplicationautoscaling.CfnScalingPolicyProps{
		PolicyName:      jsii.String("BacklogPerTask"),
		PolicyType:      jsii.String("TargetTrackingScaling"),
		ScalingTargetId: c.ScalableTarget.ScalableTargetId(),
		TargetTrackingScalingPolicyConfiguration: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingScalingPolicyConfigurationProperty{
			TargetValue:      jsii.Number(backlog),
			ScaleInCooldown:  jsii.Number(seconds(scaleIn)),
			ScaleOutCooldown: jsii.Number(seconds(scaleOut)),
			CustomizedMetricSpecification: &awsapplicationautoscaling.CfnScalingPolicy_CustomizedMetricSpecificationProperty{
				Metrics: &[]any{
					&awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDataQueryProperty{
						Id: jsii.String("visible"),
						MetricStat: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricStatProperty{
							Metric: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricProperty{
								Namespace:  jsii.String("AWS/SQS"),
								MetricName: jsii.String("ApproximateNumberOfMessagesVisible"),
								Dimensions: &[]any{dim("QueueName", q.Queue.QueueName())},
							},
							Stat: jsii.String("Sum"),
						},
						ReturnData: jsii.Bool(false),
					},
					&awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDataQueryProperty{
						Id: jsii.String("running"),
						MetricStat: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricStatProperty{
							Metric: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricProperty{
								Namespace:  jsii.String("ECS/ContainerInsights"),
								MetricName: jsii.String("RunningTaskCount"),
								Dimensions: &[]any{
									dim("ClusterName", c.Cluster.ClusterName()),
									dim("ServiceName", c.Service.ServiceName()),
								},
							},
							Stat: jsii.String("Average"),
						},
						ReturnData: jsii.Bool(false),
					},
					&awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDataQueryProperty{
						Id:         jsii.String("backlogPerTask"),
						Expression: jsii.String(c.BacklogPerTaskExpression),
						Label:      jsii.String("Visible messages per running task"),
						ReturnData: jsii.Bool(true),
					},
				},
			},
		},
	})
	return c
}
