package sqsinfra

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapplicationautoscaling"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Defaults of PollerServiceProps and HandlerContainer.
const (
	// DefaultImageDir is the build context of the worker image, relative
	// to infra/ (where `cdk` runs the app): the repository root.
	DefaultImageDir = ".."
	// DefaultDockerfile is the worker image's Dockerfile, relative to the
	// build context.
	DefaultDockerfile = "Dockerfile"
	// DefaultHandlerPort and DefaultHandlerPath are where the worker POSTs
	// each message in a HandlerContainer: http://127.0.0.1:8080/jobs
	// (containers of a Fargate task share localhost).
	DefaultHandlerPort = 8080
	DefaultHandlerPath = "/jobs"
	// DefaultHandlerName is the handler dimension of the worker's metrics
	// (`sqsworker run --handler-name`, worker.Config.HandlerName).
	DefaultHandlerName = "handler"

	DefaultPollerCPU      = 256
	DefaultPollerMemory   = 512
	DefaultMinTasks       = 1
	DefaultMaxTasks       = 10
	DefaultConcurrency    = 10 // worker.DefaultConcurrency, `sqsworker run --concurrency`
	DefaultJobDurationSec = 1
	// DefaultShutdownTimeoutSec is worker.DefaultShutdownTimeout.
	DefaultShutdownTimeoutSec = 25
	DefaultStopTimeoutSec     = 30 // ECS's default stop timeout
	// StopTimeoutMargin is how much longer than the worker's shutdown
	// timeout the container's stop timeout must be: time to make unstarted
	// messages visible again and send the pending deletes after the
	// handlers are done.
	StopTimeoutMargin = 5

	DefaultCPUAlarmPercent      = 80
	DefaultMemoryAlarmPercent   = 80
	DefaultTaskShortfallMinutes = 10
	// ScaleFromZeroCooldownSec is the cooldown of the scale-from-zero
	// step policy: longer than Container Insights takes to report the new
	// desired count, so that one alarm starts one task.
	ScaleFromZeroCooldownSec = 180
)

// HandlerContainer is the application container of a PollerService: the
// HTTP endpoint the worker container (`sqsworker run --http`) POSTs each
// message to, over the task's shared localhost.
type HandlerContainer struct {
	// Image is the handler's image, such as
	// awsecs.ContainerImage_FromAsset(dir, nil). Required.
	Image awsecs.ContainerImage
	// HealthCheck is the handler container's health check. The worker
	// container starts once the handler is HEALTHY (an ECS container
	// dependency), so no message is POSTed before the handler listens;
	// ECS replaces a task whose handler turns unhealthy. Required, with a
	// Command: an image without a shell nor curl (distroless) needs a
	// command of its own, such as ["CMD", "/handler", "-healthcheck"].
	HealthCheck *awsecs.HealthCheck
	// Port is the port the handler listens on. Default 8080
	// (DefaultHandlerPort).
	Port *float64
	// Path is the path the worker POSTs to. Default "/jobs"
	// (DefaultHandlerPath).
	Path *string
	// Environment is added to the handler's environment, after QUEUE_URL,
	// DEAD_LETTER_QUEUE_URL and IDEMPOTENCY_TABLE. Default none.
	Environment map[string]string
	// WritableRootFilesystem lets the handler write to its root file
	// system. Default false: read-only.
	WritableRootFilesystem bool
}

// PollerServiceProps configures a PollerService. Queue or PriorityQueues is
// required, and one of Handler, HandlerURL and Command.
type PollerServiceProps struct {
	// Queue is the job queue to consume. Required, unless PriorityQueues.
	Queue *JobQueue
	// PriorityQueues are the levels to consume instead of Queue, by one
	// worker that drains the higher levels first: the default command
	// passes `--queue NAME:PRIORITY:RESERVED` per level
	// (PriorityQueues.QueueFlags) instead of the queue's URL, the
	// environment has QUEUE_URL_<LEVEL> and DEAD_LETTER_QUEUE_URL_<LEVEL>
	// per level (the name in upper case, hyphens as underscores) instead
	// of QUEUE_URL and DEAD_LETTER_QUEUE_URL, the task role may consume
	// every level, and scaling tracks the visible messages per task of
	// the level in most trouble: each level's own and the higher levels'
	// (served first), weighed by the longest latency budget over its own,
	// against the target derived from the longest budget (see
	// PollerService). Not with Queue. Default nil.
	PriorityQueues *PriorityQueues
	// Table, when set, is the idempotency table the tasks use as a
	// DynamoStore (IdempotencyTable.GrantStore); its name is in the
	// environment as IDEMPOTENCY_TABLE. Default nil.
	Table *IdempotencyTable
	// EffectTables are the handler's own tables that idempotency.AddWrites
	// writes to in the idempotency record's transaction (GrantEffects).
	// Default none.
	EffectTables []awsdynamodb.ITable

	// Cluster is an ECS cluster to run in. It must have Container
	// Insights on: the backlog per task divides by the service's
	// RunningTaskCount, a Container Insights metric. A cluster of the app
	// that turns it off is an error; one whose setting cannot be read (an
	// imported cluster, or one left to the account's default) is a warning.
	// Not with Network. Default: the Network's cluster.
	Cluster awsecs.ICluster
	// Network is the VPC and cluster to run in. Not with Cluster. Default:
	// the stack's DefaultNetwork, shared by its PollerServices.
	Network *Network

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
	// Command is the worker container's command, for an image of your
	// own (a binary built on the worker package, with ecsprotect for
	// scale-in protection) or an exec-mode `sqsworker run QUEUE
	// --scale-in-protection -- COMMAND`. Not with HandlerURL. Default:
	// the sqsworker CLI, `run QUEUE_URL --http URL --concurrency N
	// --shutdown-timeout T --metrics emf --metrics-namespace NS
	// --handler-name NAME --scale-in-protection` (EMF on stdout, which
	// the awslogs driver ships and the Dashboard and breaker alarm read;
	// the last flag unless DisableScaleInProtection).
	Command []string
	// Handler is the application container the default command POSTs to.
	// Default nil: see HandlerURL.
	Handler *HandlerContainer
	// HandlerURL is where the default command POSTs each message when the
	// handler is not a Handler: an endpoint outside the task, or a
	// container you add to TaskDefinition yourself (then nothing makes the
	// worker wait for it). Not with Handler nor Command. Without Handler,
	// HandlerURL or Command the worker would POST to a port where nothing
	// listens, and every message would go round to the dead-letter queue:
	// that is an error. Default: the Handler's http://127.0.0.1:PORT/PATH.
	HandlerURL *string
	// HandlerName is the handler dimension of the worker's metrics.
	// Default "handler" (DefaultHandlerName).
	HandlerName *string
	// Environment is added to the worker container's environment, after
	// QUEUE_URL, DEAD_LETTER_QUEUE_URL and IDEMPOTENCY_TABLE. Default none.
	Environment map[string]string

	// CPU is the task's CPU units (256, 512, 1024, 2048, 4096, 8192 or
	// 16384), shared by its containers. Default 256.
	CPU *float64
	// MemoryMiB is the task's memory, valid for CPU on Fargate. Default
	// 512.
	MemoryMiB *float64

	// Concurrency is how many messages a task handles at once (the
	// worker's --concurrency). Default 10 (DefaultConcurrency).
	Concurrency *float64
	// JobDuration is how long a job takes on average, from the worker's
	// handler_duration metric or a measurement: with the queue's
	// LatencyBudget and Concurrency it sets the scaling target (see
	// PollerService). Not with BacklogPerTask. Default 1 second
	// (DefaultJobDurationSec): set it, it is the figure the construct
	// cannot guess.
	JobDuration awscdk.Duration
	// BacklogPerTask sets the scaling target (visible messages per running
	// task) directly instead. Must be > 0. Not with JobDuration. Default:
	// derived from JobDuration.
	BacklogPerTask *float64
	// DesiredTasks is the service's DesiredCount, between MinTasks and
	// MaxTasks. Set, it resets the number of tasks on every deployment that
	// updates the service, undoing the scaling in the middle of a backlog.
	// Default nil: DesiredCount is left out of the template, so that
	// CloudFormation starts a new service with one task and leaves an
	// existing service's count to the scaling policies.
	DesiredTasks *float64
	// MinTasks is the fewest tasks scaling leaves. 0 scales to zero when
	// the queue is empty, at the cost of a cold start (about a minute on
	// Fargate) for the next message: a step policy starts the first task
	// (see PollerService). Default 1.
	MinTasks *float64
	// MaxTasks is the most tasks scaling starts, >= MinTasks and >= 1.
	// Default 10.
	MaxTasks *float64
	// ScaleInCooldown is the target-tracking policy's wait after a
	// scale-in before the next, whole seconds. Default 5 minutes.
	ScaleInCooldown awscdk.Duration
	// ScaleOutCooldown is its wait after a scale-out, whole seconds.
	// Default 1 minute.
	ScaleOutCooldown awscdk.Duration

	// ShutdownTimeout is how long the worker lets running handlers finish
	// after SIGTERM (worker.Config.ShutdownTimeout, the default command's
	// --shutdown-timeout). Default 25 seconds.
	ShutdownTimeout awscdk.Duration
	// StopTimeout is how long ECS waits after SIGTERM before SIGKILL,
	// whole seconds, at most 120 (Fargate's limit) and at least
	// ShutdownTimeout + 5s (StopTimeoutMargin). Default 30 seconds.
	StopTimeout awscdk.Duration
	// DisableScaleInProtection leaves the tasks unprotected from
	// scale-in while their jobs run. By default the task role may set its
	// task's scale-in protection (ecs:UpdateTaskProtection on the
	// cluster's tasks) and the default command passes
	// --scale-in-protection: a task with a job that has run for 10s is
	// protected until the job ends, so that scaling in (and a deployment)
	// waits for long jobs instead of cutting them after ShutdownTimeout,
	// each cut spending one of the job's receives; a task protected for 2
	// hours without a pause is unprotected until it has had no long job,
	// so that deployments go on. With an Image of your own holding an
	// sqsworker CLI older than that flag, and the default command, set
	// it. Default false.
	DisableScaleInProtection bool

	// LogRetention is how long the containers' log group keeps logs.
	// Default one month.
	LogRetention awslogs.RetentionDays

	// AlarmTopic receives the service's alarms (ALARM and OK). Default:
	// the queue's AlarmTopic.
	AlarmTopic awssns.ITopic
	// CPUAlarmPercent is the average CPU utilization of the service above
	// which, for 5 minutes, the CPU alarm fires: 1 to 100. Default 80.
	CPUAlarmPercent *float64
	// MemoryAlarmPercent is the same for memory. Default 80.
	MemoryAlarmPercent *float64
	// TaskShortfallAlarmAfter is how long the service may run fewer tasks
	// than desired (tasks failing to start or crashing, a deployment
	// stuck) before the shortfall alarm fires, whole minutes from 1 to 60.
	// Default 10 minutes (DefaultTaskShortfallMinutes).
	TaskShortfallAlarmAfter awscdk.Duration
	// DisableCPUAlarm turns the CPU alarm off. Default false.
	DisableCPUAlarm bool
	// DisableMemoryAlarm turns the memory alarm off. Default false.
	DisableMemoryAlarm bool
	// DisableTaskShortfallAlarm turns the task shortfall alarm off.
	// Default false.
	DisableTaskShortfallAlarm bool
}

// PollerService is an ECS Fargate service running the sqsworker image on a
// JobQueue, with its handler as a second container.
//
// Scaling is target tracking on the backlog per task, AWS's recommended
// metric for queue workers: the queue's visible messages divided by the
// service's running tasks (metric math; the CDK's L2 target tracking takes a
// single metric, so the policy is an L1 CfnScalingPolicy). The target is
//
//	BacklogPerTask = LatencyBudget / 2 / JobDuration × Concurrency
//
// a task drains Concurrency / JobDuration messages a second, so a backlog
// at the target waits half the queue's latency budget; the other half
// absorbs the delays of scaling (metrics by the minute, the scale-out
// cooldown, a minute for a Fargate task to start), so that the age alarm,
// at the full budget, fires only when scaling cannot keep up. With
// MinTasks 0 a running-task count of zero leaves the ratio undefined and
// target tracking idle: a step scaling policy adds one task when messages
// are visible or in flight while the desired count is zero.
//
// With PriorityQueues, the target is derived from the longest budget, and
// a level of budget B counts the visible messages of its own and the
// higher levels times longest / B: with the default levels, 5 critical
// jobs per task (1 s budget) weigh as much as 18,000 low ones (an hour),
// and the level in most trouble sets the backlog (BacklogPerTaskExpression).
//
// The task role may receive, delete, change the visibility of and read the
// attributes of the queue's messages, send to its dead-letter queue, and
// use the idempotency table and the effect tables; nothing else. Deploying
// never resets the number of tasks (no DesiredCount), tags propagate from
// the service to its tasks, and the worker container runs under an init
// process (initProcessEnabled) that reaps the processes an exec-mode
// command leaves behind.
type PollerService struct {
	// Construct is the scope of the resources below. (A jsii construct
	// cannot be embedded in a Go struct passed back to jsii.)
	Construct constructs.Construct
	// Cluster is the cluster the service runs in.
	Cluster awsecs.ICluster
	// Network is the Network the service runs in, nil with a Cluster.
	Network *Network
	// TaskDefinition is the Fargate task definition.
	TaskDefinition awsecs.FargateTaskDefinition
	// Container is the worker container.
	Container awsecs.ContainerDefinition
	// HandlerContainer is the handler container, nil without Handler.
	HandlerContainer awsecs.ContainerDefinition
	// Service is the Fargate service.
	Service awsecs.FargateService
	// LogGroup is the containers' log group.
	LogGroup awslogs.LogGroup
	// ScalableTarget is the service's desired count between MinTasks and
	// MaxTasks, scaled through ECS's service-linked role.
	ScalableTarget awsapplicationautoscaling.ScalableTarget
	// ScalingPolicy is the target-tracking policy on the backlog per task.
	ScalingPolicy awsapplicationautoscaling.CfnScalingPolicy
	// BacklogPerTaskTarget is the policy's target value.
	BacklogPerTaskTarget float64
	// BacklogPerTaskExpression is the scaling policy's metric math.
	BacklogPerTaskExpression string
	// backlogQueues are the queues whose visible messages
	// BacklogPerTaskExpression reads, as backlogIDs.
	backlogQueues []*JobQueue
	backlogIDs    []string
	// ScaleFromZeroAlarm fires when messages wait for a service scaled to
	// zero; nil unless MinTasks is 0.
	ScaleFromZeroAlarm awscloudwatch.Alarm
	// ScaleFromZero is the step scaling policy the alarm invokes: one more
	// task. Nil unless MinTasks is 0.
	ScaleFromZero awsapplicationautoscaling.StepScalingAction
	// ScaleFromZeroExpression is the alarm's metric math.
	ScaleFromZeroExpression string

	// CPUAlarm fires on high average CPU utilization; nil when disabled.
	CPUAlarm awscloudwatch.Alarm
	// MemoryAlarm fires on high average memory utilization; nil when
	// disabled.
	MemoryAlarm awscloudwatch.Alarm
	// TaskShortfallAlarm fires when fewer tasks run than desired; nil
	// when disabled.
	TaskShortfallAlarm awscloudwatch.Alarm
}

var fargateCPU = map[float64][3]float64{ // CPU units: memory MiB from, to, in steps of
	256: {512, 2048, 512}, 512: {1024, 4096, 1024}, 1024: {2048, 8192, 1024}, 2048: {4096, 16384, 1024},
	4096: {8192, 30720, 1024}, 8192: {16384, 61440, 4096}, 16384: {32768, 122880, 8192},
}

// fargateMemory reports whether Fargate runs a task of cpu units with mem
// MiB, r being fargateCPU[cpu]: at 256 units, 512, 1024 or 2048 MiB only.
func fargateMemory(cpu, mem float64, r [3]float64) bool {
	if cpu == 256 {
		return mem == 512 || mem == 1024 || mem == 2048
	}
	return mem >= r[0] && mem <= r[1] && isWhole(mem/r[2])
}

// NewPollerService defines a PollerService; it panics, failing synthesis,
// on invalid props.
func NewPollerService(scope constructs.Construct, id string, props *PollerServiceProps) *PollerService {
	if props == nil {
		props = &PollerServiceProps{}
	}
	errs := newPropErrors("PollerService", id)
	if props.Queue == nil && props.PriorityQueues == nil {
		errs.add("Queue is required (or PriorityQueues)")
		errs.check()
	}
	if props.Queue != nil && props.PriorityQueues != nil {
		errs.add("give Queue or PriorityQueues, not both")
		errs.check()
	}
	queues := []*JobQueue{props.Queue}
	if pq := props.PriorityQueues; pq != nil {
		queues = nil
		for _, l := range pq.Levels {
			queues = append(queues, l.Queue)
		}
	}
	for _, jq := range queues {
		// The default command takes the queue's visibility timeout; a
		// Command of the user's may pass --visibility-timeout.
		if props.Command == nil && jq.visibilitySeconds < 1 {
			errs.add("the queue %s has a VisibilityTimeout of 0: the worker hides each message it runs for the queue's visibility timeout and extends it (the heartbeat, 1 s at least), and would exit at start; give JobQueueProps.VisibilityTimeout a whole number of seconds from 1 (default %ds)", pathOf(jq.Construct), DefaultVisibilityTimeoutSec)
		}
	}
	// q holds what the queues share (the metrics namespace, the alarm
	// topic): the queue, or the highest level.
	q := queues[0]
	if props.Cluster != nil && props.Network != nil {
		errs.add("give Cluster or Network, not both")
	}
	if props.Image != nil && (props.ImageDir != nil || props.Dockerfile != nil) {
		errs.add("ImageDir and Dockerfile are for the default image: give Image or them, not both")
	}
	h := props.Handler
	switch {
	case h == nil && props.HandlerURL == nil && props.Command == nil:
		errs.add("give Handler (the handler container the worker POSTs each message to), HandlerURL (an endpoint outside the task, or a container you add to TaskDefinition) or Command: with none, the worker would POST to 127.0.0.1:%d where nothing listens, and every message would go round to the dead-letter queue", DefaultHandlerPort)
	case props.HandlerURL != nil && (h != nil || props.Command != nil):
		errs.add("HandlerURL is for the default command without a Handler: give HandlerURL, or Handler (whose Port and Path make the URL), or Command")
	}
	if u := props.HandlerURL; u != nil && !*awscdk.Token_IsUnresolved(u) { // a token (a load balancer's name) is CloudFormation's to resolve
		if p, err := url.Parse(*u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs.add("HandlerURL must be an http:// or https:// URL, got %q", *u)
		}
	}
	port, path := float64(DefaultHandlerPort), DefaultHandlerPath
	if h != nil {
		if h.Image == nil {
			errs.add("Handler.Image is required")
		}
		if h.HealthCheck == nil || h.HealthCheck.Command == nil || len(*h.HealthCheck.Command) == 0 {
			errs.add("Handler.HealthCheck with a Command is required: the worker starts once the handler is HEALTHY; give a command the image can run, such as [\"CMD\", \"/handler\", \"-healthcheck\"] (a distroless image has no shell nor curl)")
		}
		port = errs.number("Handler.Port", h.Port, DefaultHandlerPort)
		if known(port) && (port < 1 || port > 65535 || !isWhole(port)) {
			errs.add("Handler.Port must be a whole number from 1 to 65535, got %g", port)
		}
		if h.Path != nil {
			path = *h.Path
			if !strings.HasPrefix(path, "/") {
				errs.add("Handler.Path must start with /, got %q", path)
			}
		}
	}
	handlerName := DefaultHandlerName
	if props.HandlerName != nil {
		handlerName = *props.HandlerName
		if handlerName == "" || *awscdk.Token_IsUnresolved(props.HandlerName) {
			errs.add("HandlerName must be a literal, non-empty name, got %q", handlerName)
		}
	}

	cpu := errs.number("CPU", props.CPU, DefaultPollerCPU)
	mem := errs.number("MemoryMiB", props.MemoryMiB, DefaultPollerMemory)
	if r, ok := fargateCPU[cpu]; known(cpu) && !ok {
		errs.add("CPU must be one of 256, 512, 1024, 2048, 4096, 8192, 16384, got %g", cpu)
	} else if ok && known(mem) && !fargateMemory(cpu, mem, r) {
		if cpu == 256 {
			errs.add("MemoryMiB must be 512, 1024 or 2048 for CPU 256 (Fargate's sizes), got %g", mem)
		} else {
			errs.add("MemoryMiB must be from %g to %g in steps of %g for CPU %g (Fargate's sizes), got %g", r[0], r[1], r[2], cpu, mem)
		}
	}

	concurrency := errs.number("Concurrency", props.Concurrency, DefaultConcurrency)
	if known(concurrency) && (concurrency < 1 || !isWhole(concurrency)) {
		errs.add("Concurrency must be a whole number >= 1, got %g", concurrency)
	} else if props.PriorityQueues != nil && known(concurrency) {
		// The worker refuses these at start, and the service would
		// restart it for ever: said at synthesis instead.
		reserved, none := 0, ""
		for _, l := range props.PriorityQueues.Levels {
			reserved += l.Reserved
			if l.Reserved == 0 && none == "" {
				none = l.Name
			}
		}
		switch {
		case float64(reserved) > concurrency:
			errs.add("the priority levels reserve %d slots in all but Concurrency is %g: raise Concurrency or lower the levels' Reserved", reserved, concurrency)
		case float64(reserved) == concurrency && none != "":
			errs.add("the priority levels reserve all %g slots of Concurrency, so level %q, which reserves none, would never run: raise Concurrency or lower the levels' Reserved", concurrency, none)
		}
	}
	if props.JobDuration != nil && props.BacklogPerTask != nil {
		errs.add("give JobDuration (the target is derived from it) or BacklogPerTask (the target itself), not both")
	}
	budget := 0.0
	for _, q := range queues {
		budget = max(budget, durationSeconds(q.LatencyBudget))
	}
	target := errs.number("BacklogPerTask", props.BacklogPerTask, 0)
	if props.BacklogPerTask == nil {
		job := errs.seconds("JobDuration", props.JobDuration, awscdk.Duration_Seconds(jsii.Number(DefaultJobDurationSec)))
		if known(job) && job <= 0 {
			errs.add("JobDuration must be more than 0, got %gs", job)
		} else if known(job) && known(concurrency) {
			target = BacklogPerTaskTarget(budget, job, concurrency)
		}
	} else if known(target) && target <= 0 {
		errs.add("BacklogPerTask must be > 0, got %g", target)
	}

	minTasks := errs.number("MinTasks", props.MinTasks, DefaultMinTasks)
	maxTasks := errs.number("MaxTasks", props.MaxTasks, DefaultMaxTasks)
	if known(minTasks) && (minTasks < 0 || !isWhole(minTasks)) {
		errs.add("MinTasks must be a whole number >= 0, got %g", minTasks)
	}
	if minTasks == 0 && 2*len(queues)+1 > 10 {
		errs.add("MinTasks 0 with %d levels: the scale-from-zero alarm would read %d metrics (visible and in flight per level, and the desired tasks), CloudWatch's metric math alarms read at most 10; use at most 4 levels or MinTasks >= 1", len(queues), 2*len(queues)+1)
	}
	if known(maxTasks) && (!isWhole(maxTasks) || maxTasks < max(minTasks, 1)) {
		errs.add("MaxTasks must be a whole number >= MinTasks (%g) and >= 1, got %g", minTasks, maxTasks)
	}
	var desired *float64
	if props.DesiredTasks != nil {
		d := errs.number("DesiredTasks", props.DesiredTasks, 0)
		if known(d) && (!isWhole(d) || d < minTasks || d > maxTasks) {
			errs.add("DesiredTasks must be a whole number from MinTasks (%g) to MaxTasks (%g), got %g", minTasks, maxTasks, d)
		}
		desired = jsii.Number(d)
	}
	scaleIn := errs.seconds("ScaleInCooldown", props.ScaleInCooldown, awscdk.Duration_Minutes(jsii.Number(5)))
	scaleOut := errs.seconds("ScaleOutCooldown", props.ScaleOutCooldown, awscdk.Duration_Minutes(jsii.Number(1)))
	for _, c := range []struct {
		name string
		s    float64
	}{{"ScaleInCooldown", scaleIn}, {"ScaleOutCooldown", scaleOut}} {
		if known(c.s) && (c.s < 0 || !isWhole(c.s)) {
			errs.add("%s must be whole seconds >= 0, got %gs", c.name, c.s)
		}
	}
	ss := errs.seconds("ShutdownTimeout", props.ShutdownTimeout, awscdk.Duration_Seconds(jsii.Number(DefaultShutdownTimeoutSec)))
	st := errs.seconds("StopTimeout", props.StopTimeout, awscdk.Duration_Seconds(jsii.Number(DefaultStopTimeoutSec)))
	if known(ss) && ss < 0 {
		errs.add("ShutdownTimeout must not be negative, got %gs", ss)
	}
	if known(st) && (st > 120 || !isWhole(st)) {
		errs.add("StopTimeout must be whole seconds, at most 120 (Fargate's limit), got %gs", st)
	}
	if known(st) && known(ss) && st < ss+StopTimeoutMargin {
		errs.add("StopTimeout (%gs) must be at least ShutdownTimeout (%gs) + %ds, i.e. >= %gs, or ECS kills the worker before its handlers finish: raise StopTimeout or lower ShutdownTimeout",
			st, ss, StopTimeoutMargin, ss+StopTimeoutMargin)
	}
	cpuPct := errs.number("CPUAlarmPercent", props.CPUAlarmPercent, DefaultCPUAlarmPercent)
	memPct := errs.number("MemoryAlarmPercent", props.MemoryAlarmPercent, DefaultMemoryAlarmPercent)
	for _, c := range []struct {
		name, disable string
		v             float64
	}{{"CPUAlarmPercent", "DisableCPUAlarm", cpuPct}, {"MemoryAlarmPercent", "DisableMemoryAlarm", memPct}} {
		if known(c.v) && (c.v <= 0 || c.v > 100) {
			errs.add("%s must be more than 0 and at most 100, got %g (%s turns the alarm off)", c.name, c.v, c.disable)
		}
	}
	shortfall := errs.seconds("TaskShortfallAlarmAfter", props.TaskShortfallAlarmAfter, awscdk.Duration_Minutes(jsii.Number(DefaultTaskShortfallMinutes))) / 60
	if known(shortfall) && (shortfall < 1 || shortfall > 60 || !isWhole(shortfall)) {
		errs.add("TaskShortfallAlarmAfter must be whole minutes from 1 to 60, got %g minutes", shortfall)
	}
	errs.check()

	c := &PollerService{Construct: constructs.NewConstruct(scope, jsii.String(id)), BacklogPerTaskTarget: target}

	var subnets *awsec2.SubnetSelection
	c.Cluster = props.Cluster
	if c.Cluster == nil {
		c.Network = props.Network
		if c.Network == nil {
			c.Network = DefaultNetwork(c.Construct)
		}
		c.Cluster = c.Network.Cluster
		subnets = c.Network.TaskSubnets
	} else {
		switch on, sure := containerInsights(c.Cluster); {
		case sure && !on:
			errs.add("Cluster %s must have Container Insights on (awsecs.ClusterProps.ContainerInsightsV2): the backlog per task divides by its RunningTaskCount metric", pathOf(c.Cluster))
			errs.check()
		case !sure:
			awscdk.Annotations_Of(c.Construct).AddWarningV2(jsii.String("sqsinfra:ContainerInsightsUnknown"), jsii.String(
				"the cluster's Container Insights setting cannot be read (an imported cluster, or one left to the account's default): the backlog-per-task scaling needs it on (ECS/ContainerInsights RunningTaskCount), or the service never scales"), nil)
		}
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
	logs := func(prefix string) awsecs.LogDriver {
		return awsecs.LogDrivers_AwsLogs(&awsecs.AwsLogDriverProps{
			StreamPrefix: jsii.String(prefix),
			LogGroup:     c.LogGroup,
			Mode:         awsecs.AwsLogDriverMode_NON_BLOCKING,
		})
	}
	env := func(extra map[string]string) *map[string]*string {
		e := map[string]*string{}
		if props.PriorityQueues == nil {
			e["QUEUE_URL"] = q.Queue.QueueUrl()
			e["DEAD_LETTER_QUEUE_URL"] = q.DeadLetterQueue.QueueUrl()
		} else {
			for _, l := range props.PriorityQueues.Levels {
				suffix := strings.ToUpper(strings.ReplaceAll(l.Name, "-", "_"))
				e["QUEUE_URL_"+suffix] = l.Queue.Queue.QueueUrl()
				e["DEAD_LETTER_QUEUE_URL_"+suffix] = l.Queue.DeadLetterQueue.QueueUrl()
			}
		}
		if props.Table != nil {
			e["IDEMPOTENCY_TABLE"] = props.Table.Table.TableName()
		}
		for k, v := range extra {
			e[k] = jsii.String(v)
		}
		return &e
	}

	var command []*string
	if props.Command != nil {
		command = *jsii.Strings(props.Command...)
	} else {
		handlerURL := fmt.Sprintf("http://127.0.0.1:%g%s", port, path)
		if props.HandlerURL != nil {
			handlerURL = *props.HandlerURL
		}
		command = []*string{jsii.String("run")}
		if props.PriorityQueues == nil {
			command = append(command, q.Queue.QueueUrl())
		} else {
			command = append(command, props.PriorityQueues.QueueFlags()...)
		}
		command = append(command, jsii.String("--http"), jsii.String(handlerURL),
			jsii.String("--concurrency"), jsii.String(strconv.FormatFloat(concurrency, 'f', -1, 64)),
			jsii.String("--shutdown-timeout"), jsii.String(goDuration(ss)),
			jsii.String("--metrics"), jsii.String("emf"),
			jsii.String("--metrics-namespace"), jsii.String(q.MetricsNamespace),
			jsii.String("--handler-name"), jsii.String(handlerName))
		if !props.DisableScaleInProtection {
			command = append(command, jsii.String("--scale-in-protection"))
		}
	}
	c.Container = c.TaskDefinition.AddContainer(jsii.String("Worker"), &awsecs.ContainerDefinitionOptions{
		Image:                  image,
		Command:                &command,
		Environment:            env(props.Environment),
		StopTimeout:            awscdk.Duration_Seconds(jsii.Number(st)),
		Essential:              jsii.Bool(true),
		ReadonlyRootFilesystem: jsii.Bool(true),
		Logging:                logs("worker"),
		// An init process as PID 1 forwards signals and reaps the
		// orphans of exec-mode commands (their grandchildren).
		LinuxParameters: awsecs.NewLinuxParameters(c.Construct, jsii.String("WorkerLinuxParameters"), &awsecs.LinuxParametersProps{
			InitProcessEnabled: jsii.Bool(true),
		}),
	})
	if h != nil {
		c.HandlerContainer = c.TaskDefinition.AddContainer(jsii.String("Handler"), &awsecs.ContainerDefinitionOptions{
			Image:                  h.Image,
			Environment:            env(h.Environment),
			Essential:              jsii.Bool(true),
			ReadonlyRootFilesystem: jsii.Bool(!h.WritableRootFilesystem),
			HealthCheck:            h.HealthCheck,
			Logging:                logs("handler"),
		})
		c.Container.AddContainerDependencies(&awsecs.ContainerDependency{
			Container: c.HandlerContainer,
			Condition: awsecs.ContainerDependencyCondition_HEALTHY,
		})
	}

	c.Service = awsecs.NewFargateService(c.Construct, jsii.String("Service"), &awsecs.FargateServiceProps{
		Cluster:           c.Cluster,
		TaskDefinition:    c.TaskDefinition,
		DesiredCount:      desired, // nil: see PollerServiceProps.DesiredTasks
		MinHealthyPercent: jsii.Number(100),
		MaxHealthyPercent: jsii.Number(200),
		CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Rollback: jsii.Bool(true)},
		// The worker only makes outbound calls.
		AssignPublicIp:       jsii.Bool(false),
		VpcSubnets:           subnets,
		PropagateTags:        awsecs.PropagatedTagSource_SERVICE,
		EnableECSManagedTags: jsii.Bool(true),
	})

	role := c.TaskDefinition.TaskRole()
	// Receive, delete, change visibility, get attributes (redrive policy,
	// depth) on the queue; send permanent failures to the dead-letter
	// queue, whose depth the worker also reads; send waiting copies of
	// delayed jobs back to the queue (delays past SQS's 15 minutes and
	// backoffs past 12 hours); list the queue's dead-letter sources, which
	// `sqsworker run` reads to refuse a dead-letter queue given by mistake.
	for _, q := range queues {
		q.Queue.GrantConsumeMessages(role)
		q.Queue.GrantSendMessages(role)
		q.Queue.Grant(role, jsii.String("sqs:ListDeadLetterSourceQueues"))
		q.DeadLetterQueue.GrantSendMessages(role)
	}
	if props.Table != nil {
		props.Table.GrantStore(role)
	}
	GrantEffects(role, props.EffectTables...)
	if !props.DisableScaleInProtection {
		c.grantScaleInProtection(role)
	}

	c.scale(queues, minTasks, maxTasks, scaleIn, scaleOut)
	c.alarms(props, q, cpuPct, memPct, shortfall)
	return c
}

// grantScaleInProtection lets role set the scale-in protection of the
// cluster's tasks: the ECS agent sets a task's protection with its task
// role's credentials. The statement is a policy of its own, which tells
// cdk-nag why its resource ends with a wildcard: the tasks' ARNs are not
// known before they start.
func (c *PollerService) grantScaleInProtection(role awsiam.IRole) {
	p := awsiam.NewPolicy(c.Construct, jsii.String("ScaleInProtection"), &awsiam.PolicyProps{
		Roles: &[]awsiam.IRole{role},
		Statements: &[]awsiam.PolicyStatement{awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions: jsii.Strings("ecs:UpdateTaskProtection"),
			Resources: jsii.Strings(*awscdk.Stack_Of(c.Construct).FormatArn(&awscdk.ArnComponents{
				Service: jsii.String("ecs"), Resource: jsii.String("task"),
				ResourceName: jsii.String(*c.Cluster.ClusterName() + "/*"), ArnFormat: awscdk.ArnFormat_SLASH_RESOURCE_NAME,
			})),
		})},
	})
	c.Service.Node().AddDependency(p) // tasks start with it
	p.Node().DefaultChild().(awscdk.CfnResource).AddMetadata(jsii.String("cdk_nag"), map[string]any{
		"rules_to_suppress": []any{map[string]any{
			"id":         "AwsSolutions-IAM5",
			"applies_to": []any{map[string]any{"regex": `/^Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task\/.+\/\*$/`}},
			"reason": "A task sets its own scale-in protection: the resource is the tasks of the service's cluster, " +
				"whose ARNs are known only once they start.",
		}},
	})
}

// backlogExpression returns the metric IDs of the queues' visible
// messages ("visible", or "visible0", "visible1", ... for the levels of
// PriorityQueues) and the backlog per task: visible / running for one
// queue. A level's jobs wait behind its own and the higher levels' (the
// worker drains them first), against its own latency budget: each level
// weighs the visible messages of its own and the higher levels by the
// longest budget over its own, so that the target, derived from the
// longest budget, holds for every level, and the level in most trouble
// scales the service (MAX). Summing the levels against the longest
// budget's target would leave a flood of critical jobs, whose budget is
// 3,600 times shorter than low's, with no task added.
func backlogExpression(queues []*JobQueue) (ids []string, expr string) {
	if len(queues) == 1 {
		return []string{"visible"}, "visible / running"
	}
	longest := 0.0
	for _, q := range queues {
		longest = max(longest, durationSeconds(q.LatencyBudget))
	}
	var terms []string
	for i, q := range queues {
		ids = append(ids, fmt.Sprintf("visible%d", i))
		term := strings.Join(ids, " + ")
		if i > 0 {
			term = "(" + term + ")"
		}
		if b := durationSeconds(q.LatencyBudget); b > 0 && b < longest {
			term += " * " + strconv.FormatFloat(longest/b, 'f', -1, 64)
		}
		terms = append(terms, term)
	}
	return ids, "MAX([" + strings.Join(terms, ", ") + "]) / running"
}

// BacklogPerTaskTarget is the scaling target of a PollerService:
// budget / 2 / job × concurrency (budget and job in seconds), the backlog a
// task drains in half the latency budget.
func BacklogPerTaskTarget(budget, job, concurrency float64) float64 {
	return budget / 2 / job * concurrency
}

// containerInsights reports whether cluster has Container Insights on, and
// whether that could be read (a cluster defined in the app).
func containerInsights(cluster awsecs.ICluster) (on, sure bool) {
	cfn, ok := cluster.Node().DefaultChild().(awsecs.CfnCluster)
	if !ok || cfn == nil || cfn.ClusterSettings() == nil {
		// Imported, or left to the account's default setting.
		return false, false
	}
	b, err := json.Marshal(awscdk.Stack_Of(cluster).Resolve(cfn.ClusterSettings()))
	if err != nil {
		return false, false
	}
	var settings []struct{ Name, Value string }
	_ = json.Unmarshal(b, &settings)
	for _, s := range settings {
		if s.Name == "containerInsights" {
			return s.Value == "enabled" || s.Value == "enhanced", true
		}
	}
	return false, false
}

// serviceMetric is a Container Insights metric of the service.
func (c *PollerService) serviceMetric(name, stat, label string, period awscdk.Duration) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String("ECS/ContainerInsights"), MetricName: jsii.String(name),
		DimensionsMap: &map[string]*string{"ClusterName": c.Cluster.ClusterName(), "ServiceName": c.Service.ServiceName()},
		Period:        period, Statistic: jsii.String(stat), Label: jsii.String(label),
	})
}

// backlogMetrics are the metrics BacklogPerTaskExpression reads, by ID,
// for a graph of period.
func (c *PollerService) backlogMetrics(period awscdk.Duration) *map[string]awscloudwatch.IMetric {
	m := map[string]awscloudwatch.IMetric{"running": c.RunningTaskMetric("Average", period)}
	for i, q := range c.backlogQueues {
		m[c.backlogIDs[i]] = q.Queue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: period, Statistic: jsii.String("Sum"), Label: jsii.String("visible " + *q.Construct.Node().Id())})
	}
	return &m
}

// RunningTaskMetric is the service's running tasks (Container Insights).
func (c *PollerService) RunningTaskMetric(stat string, period awscdk.Duration) awscloudwatch.Metric {
	return c.serviceMetric("RunningTaskCount", stat, "running tasks", period)
}

// DesiredTaskMetric is the service's desired tasks (Container Insights).
func (c *PollerService) DesiredTaskMetric(stat string, period awscdk.Duration) awscloudwatch.Metric {
	return c.serviceMetric("DesiredTaskCount", stat, "desired tasks", period)
}

// scale defines the scalable target, the target-tracking policy and, with
// minTasks 0, the scale-from-zero step policy.
func (c *PollerService) scale(queues []*JobQueue, minTasks, maxTasks, scaleIn, scaleOut float64) {
	stack := awscdk.Stack_Of(c.Construct)
	// ECS's service-linked role for Application Auto Scaling (what
	// BaseService.autoScaleTaskCount uses): the L2 ScalableTarget would
	// otherwise create a role of its own that ECS scaling never uses.
	linkedRole := awsiam.Role_FromRoleArn(c.Construct, jsii.String("AutoScalingServiceLinkedRole"), stack.FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("iam"), Region: jsii.String(""),
		Resource:     jsii.String("role/aws-service-role/ecs.application-autoscaling.amazonaws.com"),
		ResourceName: jsii.String("AWSServiceRoleForApplicationAutoScaling_ECSService"),
	}), &awsiam.FromRoleArnOptions{Mutable: jsii.Bool(false)})
	c.ScalableTarget = awsapplicationautoscaling.NewScalableTarget(c.Construct, jsii.String("ScalableTarget"), &awsapplicationautoscaling.ScalableTargetProps{
		ServiceNamespace:  awsapplicationautoscaling.ServiceNamespace_ECS,
		ResourceId:        jsii.String(fmt.Sprintf("service/%s/%s", *c.Cluster.ClusterName(), *c.Service.ServiceName())),
		ScalableDimension: jsii.String("ecs:service:DesiredCount"),
		MinCapacity:       jsii.Number(minTasks),
		MaxCapacity:       jsii.Number(maxTasks),
		Role:              linkedRole,
	})
	// The L2 target tracking policy takes a single metric only; backlog per
	// task needs metric math, which CloudFormation's target tracking
	// (CustomizedMetricSpecification.Metrics) supports: so an L1 policy.
	// One queue's visible messages are "visible"; the levels of
	// PriorityQueues are visible0, visible1, ... summed.
	ids, expr := backlogExpression(queues)
	c.BacklogPerTaskExpression = expr
	c.backlogQueues, c.backlogIDs = queues, ids
	dim := func(n string, v *string) *awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDimensionProperty {
		return &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDimensionProperty{Name: jsii.String(n), Value: v}
	}
	var metrics []any
	for i, q := range queues {
		metrics = append(metrics, &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricDataQueryProperty{
			Id: jsii.String(ids[i]),
			MetricStat: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricStatProperty{
				Metric: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingMetricProperty{
					Namespace:  jsii.String("AWS/SQS"),
					MetricName: jsii.String("ApproximateNumberOfMessagesVisible"),
					Dimensions: &[]any{dim("QueueName", q.Queue.QueueName())},
				},
				Stat: jsii.String("Sum"),
			},
			ReturnData: jsii.Bool(false),
		})
	}
	metrics = append(metrics,
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
	)
	c.ScalingPolicy = awsapplicationautoscaling.NewCfnScalingPolicy(c.Construct, jsii.String("BacklogPerTaskScaling"), &awsapplicationautoscaling.CfnScalingPolicyProps{
		PolicyName:      jsii.String("BacklogPerTask"),
		PolicyType:      jsii.String("TargetTrackingScaling"),
		ScalingTargetId: c.ScalableTarget.ScalableTargetId(),
		TargetTrackingScalingPolicyConfiguration: &awsapplicationautoscaling.CfnScalingPolicy_TargetTrackingScalingPolicyConfigurationProperty{
			TargetValue:      jsii.Number(c.BacklogPerTaskTarget),
			ScaleInCooldown:  jsii.Number(scaleIn),
			ScaleOutCooldown: jsii.Number(scaleOut),
			CustomizedMetricSpecification: &awsapplicationautoscaling.CfnScalingPolicy_CustomizedMetricSpecificationProperty{
				Metrics: &metrics,
			},
		},
	})
	if minTasks > 0 {
		return
	}
	// Scale from zero: with no task running, backlog per task is undefined
	// and target tracking does nothing. Messages waiting (visible, or in
	// flight in the leases of stopped tasks) while the desired count is
	// zero add one task. A missing DesiredTaskCount counts as zero
	// (FILL), so that a service Container Insights stops reporting at zero
	// tasks still starts; at worst a late metric adds a task that target
	// tracking removes. ChangeInCapacity, not ExactCapacity: an alarm
	// during a backlog must never set a scaled-out service back to one
	// task.
	// The levels of PriorityQueues: visible0 + inflight0 + visible1 + ...
	waiting := "visible + inflight"
	using := map[string]awscloudwatch.IMetric{"desired": c.DesiredTaskMetric("Maximum", minute())}
	var terms []string
	for i, q := range queues {
		v, f := "visible", "inflight"
		if len(queues) > 1 {
			v, f = fmt.Sprintf("visible%d", i), fmt.Sprintf("inflight%d", i)
		}
		terms = append(terms, v, f)
		using[v] = q.Queue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: minute(), Statistic: jsii.String("Maximum")})
		using[f] = q.Queue.MetricApproximateNumberOfMessagesNotVisible(&awscloudwatch.MetricOptions{Period: minute(), Statistic: jsii.String("Maximum")})
	}
	if len(queues) > 1 {
		// SQS stops reporting a queue's metrics after six hours without
		// a call (no task polls it at zero tasks), and a sum with a
		// missing operand has no value: one idle level would keep the
		// alarm from seeing another's jobs, and the service at zero.
		for i, t := range terms {
			terms[i] = "FILL(" + t + ", 0)"
		}
		waiting = strings.Join(terms, " + ")
	}
	c.ScaleFromZeroExpression = "IF(FILL(desired, 0) == 0, " + waiting + ", 0)"
	c.ScaleFromZeroAlarm = awscloudwatch.NewAlarm(c.Construct, jsii.String("ScaleFromZeroAlarm"), &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String("Messages wait while the service has no task: starts the first one (scaling action, no notification)."),
		Metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression:   jsii.String(c.ScaleFromZeroExpression),
			UsingMetrics: &using,
			Label:        jsii.String("messages waiting for a service with no task"),
			Period:       minute(),
		}),
		Threshold:          jsii.Number(0),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
		// SQS reports nothing for an inactive queue: no message.
		TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
	})
	c.ScaleFromZero = awsapplicationautoscaling.NewStepScalingAction(c.Construct, jsii.String("ScaleFromZero"), &awsapplicationautoscaling.StepScalingActionProps{
		ScalingTarget:         c.ScalableTarget,
		AdjustmentType:        awsapplicationautoscaling.AdjustmentType_CHANGE_IN_CAPACITY,
		Cooldown:              awscdk.Duration_Seconds(jsii.Number(ScaleFromZeroCooldownSec)),
		MetricAggregationType: awsapplicationautoscaling.MetricAggregationType_MAXIMUM,
	})
	c.ScaleFromZero.AddAdjustment(&awsapplicationautoscaling.AdjustmentTier{Adjustment: jsii.Number(1), LowerBound: jsii.Number(0)})
	c.ScaleFromZeroAlarm.AddAlarmAction(awscloudwatchactions.NewApplicationScalingAction(c.ScaleFromZero))
}

func (c *PollerService) alarms(props *PollerServiceProps, q *JobQueue, cpuPct, memPct, shortfallMinutes float64) {
	if !props.DisableTaskShortfallAlarm {
		c.TaskShortfallAlarm = awscloudwatch.NewAlarm(c.Construct, jsii.String("TaskShortfallAlarm"), &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String(fmt.Sprintf("The service has run fewer tasks than desired for %g minutes: tasks fail to start or crash (image pull, health check, permissions), or a deployment is stuck.", shortfallMinutes)),
			Metric: awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
				// A running count that is missing while tasks are desired
				// (none has started) is none running, not no evidence.
				Expression: jsii.String("desired - FILL(running, 0)"),
				UsingMetrics: &map[string]awscloudwatch.IMetric{
					"desired": c.DesiredTaskMetric("Minimum", minute()),
					"running": c.RunningTaskMetric("Maximum", minute()),
				},
				Label:  jsii.String("tasks missing"),
				Period: minute(),
			}),
			Threshold:          jsii.Number(0),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(shortfallMinutes),
			// No Container Insights data (service deleted or the setting
			// off): no evidence of a shortfall.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	util := func(id, what string, m awscloudwatch.Metric, pct float64) awscloudwatch.Alarm {
		return awscloudwatch.NewAlarm(c.Construct, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(fmt.Sprintf("The service's average %s utilization has been above %g%% for 5 minutes: give the task more %s (CPU, MemoryMiB) or lower Concurrency.", what, pct, what)),
			Metric:             m,
			Threshold:          jsii.Number(pct),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(5),
			// No data: no task running (scaled to zero).
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}
	if !props.DisableCPUAlarm {
		c.CPUAlarm = util("CpuAlarm", "CPU", c.Service.MetricCpuUtilization(&awscloudwatch.MetricOptions{Period: minute(), Statistic: jsii.String("Average")}), cpuPct)
	}
	if !props.DisableMemoryAlarm {
		c.MemoryAlarm = util("MemoryAlarm", "memory", c.Service.MetricMemoryUtilization(&awscloudwatch.MetricOptions{Period: minute(), Statistic: jsii.String("Average")}), memPct)
	}
	topic := props.AlarmTopic
	if topic == nil {
		topic = q.AlarmTopic
	}
	notify(topic, c.TaskShortfallAlarm, c.CPUAlarm, c.MemoryAlarm)
}
