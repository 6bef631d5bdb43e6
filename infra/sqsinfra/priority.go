package sqsinfra

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// PriorityLevel is one level of PriorityQueues: a queue with its own
// dead-letter queue and latency budget. Name is required; every other
// field is optional.
type PriorityLevel struct {
	// Name names the level: its construct ID, the end of its queue's
	// generated name, and the level in the worker's --queue flags. 1 to 20
	// lowercase letters, digits and hyphens, unique among the levels.
	// Required.
	Name string
	// LatencyBudget is how long a job of this level may wait: it weighs
	// the level's backlog in a PollerService's scaling. The level's age
	// alarm fires when its oldest message is older than the budget, or
	// than a minute when the budget is shorter (SQS counts a message's age
	// until it is deleted, its run included, and reports it by the
	// minute). Whole seconds, at least 1 second. Default for the levels named "critical" 1 second,
	// "high" 10 seconds, "normal" 5 minutes and "low" 1 hour (the
	// DefaultPriorityLevels); required for other names.
	LatencyBudget awscdk.Duration
	// MaxReceiveCount is the level's redrive policy's maxReceiveCount, as
	// in JobQueueProps. Default 5 (DefaultMaxReceiveCount).
	MaxReceiveCount *float64
	// VisibilityTimeout is the level's visibility timeout, as in
	// JobQueueProps. Default 30 seconds, raised by a Lambda consumer to
	// what it needs.
	VisibilityTimeout awscdk.Duration
	// RetentionPeriod is as in JobQueueProps. Default 4 days.
	RetentionPeriod awscdk.Duration
	// QueueName is the level's physical queue name, as in JobQueueProps.
	// Default: generated from the construct's path, which ends in Name.
	QueueName *string

	// Reserved is how many of a worker's slots only this level may use
	// (the reserved part of `sqsworker run --queue NAME:PRIORITY:RESERVED`
	// that a PollerService of the PriorityQueues passes). A whole number
	// >= 0. Default 0.
	Reserved *float64
	// MaxConcurrency caps the concurrent invocations of the level's event
	// source in NewPriorityLambdaConsumer (its ScalingConfig
	// MaximumConcurrency), 2 to 1000: capping the lower levels keeps a
	// flood of them from taking the function's concurrency from the
	// higher ones. Default nil: no cap (then the function cannot have a
	// ReservedConcurrency).
	MaxConcurrency *float64
}

// DefaultPriorityLevels returns the levels of PriorityQueuesProps.Levels
// by default, highest first: critical (budget 1 second), high (10 seconds),
// normal (5 minutes) and low (1 hour), without reserved slots nor
// concurrency caps.
func DefaultPriorityLevels() []PriorityLevel {
	return []PriorityLevel{{Name: "critical"}, {Name: "high"}, {Name: "normal"}, {Name: "low"}}
}

// defaultBudgets are the latency budgets of the default levels' names, in
// seconds.
var defaultBudgets = map[string]float64{"critical": 1, "high": 10, "normal": 300, "low": 3600}

// PriorityQueuesProps configures PriorityQueues. Every field is optional.
type PriorityQueuesProps struct {
	// Levels are the levels, highest priority first: a worker drains a
	// level before the ones after it. At most 10. Default
	// DefaultPriorityLevels().
	Levels []PriorityLevel
	// EncryptionKey encrypts every level's queues, as in JobQueueProps.
	// Default nil: SSE-SQS.
	EncryptionKey awskms.IKey
	// RemovalPolicy is every level's queues', as in JobQueueProps. Default
	// RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// MetricsNamespace is the consumers' EMF namespace, as in
	// JobQueueProps. Default "sqsworker".
	MetricsNamespace *string
	// Alarms configures every level's alarms, as in JobQueueProps (each
	// level's age alarm is against its own LatencyBudget); with
	// CreateTopic, one AlarmTopic serves all levels. Default: all on,
	// without a topic.
	Alarms QueueAlarmProps
}

// PriorityQueues is a JobQueue per priority level, for a consumer that
// drains the higher levels first (SQS has no message priority): each level
// has its own dead-letter queue, redrive policy and alarms, its age alarm
// against the level's latency budget (by default critical 1 s, high 10 s,
// normal 5 min, low 1 h), or a minute when the budget is shorter:
// ApproximateAgeOfOldestMessage is reported by the minute, and counts a
// message until it is deleted, its run included, so that an alarm at
// seconds would fire on healthy jobs.
//
// Consume it with a PollerService (PollerServiceProps.PriorityQueues: one
// worker over every level, `sqsworker run --queue NAME:PRIORITY:RESERVED`
// per level) or with NewPriorityLambdaConsumer (one function, an event
// source mapping per level with the level's MaxConcurrency).
type PriorityQueues struct {
	// Construct is the scope of the resources below.
	Construct constructs.Construct
	// Levels are the levels, highest priority first.
	Levels []*PriorityQueueLevel
	// AlarmTopic is the topic of the alarms (given or created), nil
	// without one.
	AlarmTopic awssns.ITopic
	// CreatedAlarmTopic is the AlarmTopic made for Alarms.CreateTopic, nil
	// otherwise.
	CreatedAlarmTopic *AlarmTopic
}

// PriorityQueueLevel is a level of PriorityQueues as defined.
type PriorityQueueLevel struct {
	// Name is the level's name.
	Name string
	// Priority is the level's priority for the worker's --queue flag:
	// the number of levels for the first (highest), down to 1 for the
	// last; a higher number is drained first.
	Priority int
	// Reserved is the worker slots reserved for the level.
	Reserved int
	// MaxConcurrency is the level's event source cap, 0 without one.
	MaxConcurrency float64
	// Queue is the level's queue, dead-letter queue and alarms.
	Queue *JobQueue

	maxConcurrency *float64
}

var levelName = regexp.MustCompile(`^[a-z0-9-]{1,20}$`)

// NewPriorityQueues defines PriorityQueues; it panics, failing synthesis,
// on invalid props.
func NewPriorityQueues(scope constructs.Construct, id string, props *PriorityQueuesProps) *PriorityQueues {
	if props == nil {
		props = &PriorityQueuesProps{}
	}
	levels := props.Levels
	if levels == nil {
		levels = DefaultPriorityLevels()
	}
	errs := newPropErrors("PriorityQueues", id)
	if len(levels) == 0 || len(levels) > 10 {
		errs.add("Levels must hold 1 to 10 levels, got %d", len(levels))
	}
	if props.Alarms.Topic != nil && props.Alarms.CreateTopic {
		errs.add("Alarms: give Topic or CreateTopic, not both")
	}
	seen := map[string]bool{}
	reserved := make([]float64, len(levels))
	for i, l := range levels {
		if !levelName.MatchString(l.Name) {
			errs.add("Levels[%d].Name must be 1 to 20 lowercase letters, digits and hyphens, got %q", i, l.Name)
		}
		if seen[l.Name] {
			errs.add("Levels[%d].Name %q is used twice: level names must be unique", i, l.Name)
		}
		seen[l.Name] = true
		if _, ok := defaultBudgets[l.Name]; !ok && l.LatencyBudget == nil {
			errs.add("Levels[%d] (%q) needs a LatencyBudget: only critical, high, normal and low have a default", i, l.Name)
		}
		reserved[i] = errs.number(fmt.Sprintf("Levels[%d].Reserved", i), l.Reserved, 0)
		if r := reserved[i]; known(r) && (r < 0 || !isWhole(r)) {
			errs.add("Levels[%d].Reserved must be a whole number >= 0, got %g", i, r)
		}
	}
	errs.check()

	c := &PriorityQueues{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	alarms := props.Alarms
	c.AlarmTopic = alarms.Topic
	if alarms.CreateTopic {
		c.CreatedAlarmTopic = NewAlarmTopic(c.Construct, "AlarmTopic", nil)
		c.AlarmTopic = c.CreatedAlarmTopic.Topic
		alarms.CreateTopic = false
		alarms.Topic = c.AlarmTopic
	}
	for i, l := range levels {
		budget := l.LatencyBudget
		if budget == nil {
			budget = secondsDuration(defaultBudgets[l.Name])
		}
		q := newJobQueue(c.Construct, l.Name, &JobQueueProps{
			QueueName:         l.QueueName,
			VisibilityTimeout: l.VisibilityTimeout,
			RetentionPeriod:   l.RetentionPeriod,
			MaxReceiveCount:   l.MaxReceiveCount,
			EncryptionKey:     props.EncryptionKey,
			RemovalPolicy:     props.RemovalPolicy,
			LatencyBudget:     budget,
			MetricsNamespace:  props.MetricsNamespace,
			Alarms:            alarms,
		}, fmt.Sprintf("PriorityQueues %q: level", id), 1)
		level := &PriorityQueueLevel{
			Name: l.Name, Priority: len(levels) - i, Reserved: int(reserved[i]),
			Queue: q, maxConcurrency: l.MaxConcurrency,
		}
		if l.MaxConcurrency != nil && !*awscdk.Token_IsUnresolved(*l.MaxConcurrency) {
			level.MaxConcurrency = *l.MaxConcurrency
		}
		c.Levels = append(c.Levels, level)
	}
	return c
}

// Level returns the level named name, or nil.
func (c *PriorityQueues) Level(name string) *PriorityQueueLevel {
	for _, l := range c.Levels {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// QueueFlags are the worker's --queue flags for the levels, highest
// first: "--queue", "NAME:PRIORITY:RESERVED" for each level, NAME the
// level's queue name (a token resolved at deployment), which `sqsworker
// run` resolves to its URL.
func (c *PriorityQueues) QueueFlags() []*string {
	var flags []*string
	for _, l := range c.Levels {
		flags = append(flags, jsii.String("--queue"),
			awscdk.Fn_Join(jsii.String(":"), &[]*string{
				l.Queue.Queue.QueueName(), jsii.String(strconv.Itoa(l.Priority)), jsii.String(strconv.Itoa(l.Reserved)),
			}))
	}
	return flags
}

// GrantConsume lets grantee consume every level as the runtimes do:
// receive, delete, change the visibility of and read the attributes of the
// level's messages, send waiting copies of delayed jobs back to the level,
// and send to its dead-letter queue.
func (c *PriorityQueues) GrantConsume(grantee awsiam.IGrantable) {
	for _, l := range c.Levels {
		l.Queue.Queue.GrantConsumeMessages(grantee)
		l.Queue.Queue.GrantSendMessages(grantee)
		l.Queue.DeadLetterQueue.GrantSendMessages(grantee)
	}
}

// PriorityLambdaConsumerProps configures NewPriorityLambdaConsumer. Queues
// is required.
type PriorityLambdaConsumerProps struct {
	// Queues are the levels to consume. Required.
	Queues *PriorityQueues
	// Function configures the function as for a LambdaConsumer, but
	// without Queue and MaxConcurrency (each level has its own
	// PriorityLevel.MaxConcurrency). Its ReservedConcurrency, when set,
	// must be at least the sum of the levels' MaxConcurrency (and every
	// level needs one), so that no event source is throttled: the
	// function then has exactly the concurrency the levels' caps share
	// out. Default: a LambdaConsumer's defaults.
	Function LambdaConsumerProps
}

// NewPriorityLambdaConsumer defines a LambdaConsumer of PriorityQueues:
// one function with an SQS event source mapping per level, highest first,
// each with the level's MaxConcurrency. Lambda has no priority between
// event sources: the levels' caps and the function's reserved concurrency
// are what keep a flood of a low level from taking the concurrency of the
// critical one. The function's role may consume every level and send to
// every level's dead-letter queue; each queue is checked (and its
// visibility timeout raised) as for a LambdaConsumer. It panics, failing
// synthesis, on invalid props.
func NewPriorityLambdaConsumer(scope constructs.Construct, id string, props *PriorityLambdaConsumerProps) *LambdaConsumer {
	if props == nil {
		props = &PriorityLambdaConsumerProps{}
	}
	errs := newPropErrors("PriorityLambdaConsumer", id)
	if props.Queues == nil {
		errs.add("Queues is required")
		errs.check()
	}
	if props.Function.Queue != nil {
		errs.add("Function.Queue must be nil: the function consumes the levels of Queues")
	}
	if props.Function.MaxConcurrency != nil {
		errs.add("Function.MaxConcurrency must be nil: give each level its PriorityLevel.MaxConcurrency")
	}
	var sources []lambdaSource
	for _, l := range props.Queues.Levels {
		sources = append(sources, lambdaSource{
			id: "SqsEventSource-" + l.Name, prefix: fmt.Sprintf("level %q: ", l.Name), queue: l.Queue,
			maxConcurrency: l.maxConcurrency, maxConcurrencyProp: fmt.Sprintf("level %q's MaxConcurrency", l.Name),
		})
	}
	return newLambdaConsumer(scope, id, &props.Function, errs, sources)
}
