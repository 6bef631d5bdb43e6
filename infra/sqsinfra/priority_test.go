package sqsinfra_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/jsii-runtime-go"

	"github.com/sqsworker/sqsworker/infra/sqsinfra"
)

// TestPriorityQueuesDefaults checks the default levels: a queue and a
// dead-letter queue each, and each level's age alarm at its own budget, or
// a minute when the budget is shorter.
func TestPriorityQueuesDefaults(t *testing.T) {
	s := newStack()
	pq := sqsinfra.NewPriorityQueues(s, "Prio", &sqsinfra.PriorityQueuesProps{Alarms: sqsinfra.QueueAlarmProps{CreateTopic: true}})
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "8 queues", func() { tpl.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(8)) })
	check(t, "one topic", func() { tpl.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(1)) })

	var names []string
	for i, l := range pq.Levels {
		names = append(names, l.Name)
		if l.Priority != 4-i {
			t.Errorf("level %s: priority %d, want %d", l.Name, l.Priority, 4-i)
		}
	}
	if got := strings.Join(names, ","); got != "critical,high,normal,low" {
		t.Errorf("levels %s", got)
	}

	// Each level's age alarm compares the level's queue's oldest message
	// with its budget.
	budgets := map[string]float64{"critical": 1, "high": 10, "normal": 300, "low": 3600}
	alarms := resourcesOf(tpl, "AWS::CloudWatch::Alarm")
	for level, budget := range budgets {
		found := false
		for id, a := range alarms {
			p := props(a)
			if !strings.HasPrefix(id, "Prio"+level) || p["MetricName"] != "ApproximateAgeOfOldestMessage" {
				continue
			}
			found = true
			// A minute at least: SQS's age counts a running job's message
			// and comes by the minute. Before, critical's alarm at 1 s
			// fired on every job that took a second.
			if want := max(budget, 60); p["Threshold"] != want {
				t.Errorf("%s: age alarm threshold %v, want %v", level, p["Threshold"], want)
			}
			dims, _ := json.Marshal(p["Dimensions"])
			if !strings.Contains(string(dims), "Prio"+level+"Queue") {
				t.Errorf("%s: age alarm on %s", level, dims)
			}
			if actions, _ := json.Marshal(p["AlarmActions"]); !strings.Contains(string(actions), "PrioAlarmTopic") {
				t.Errorf("%s: age alarm notifies %s", level, actions)
			}
		}
		if !found {
			t.Errorf("%s: no age alarm", level)
		}
	}
	// Dead-letter arrivals are watched per level.
	dl := 0
	for id := range alarms {
		if strings.Contains(id, "DeadLetterAlarm") {
			dl++
		}
	}
	if dl != 4 {
		t.Errorf("%d dead-letter alarms, want 4", dl)
	}
	// Each level's redrive policy points at its own dead-letter queue.
	check(t, "critical's redrive", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{
			"RedrivePolicy": map[string]any{
				"deadLetterTargetArn": map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^PriocriticalDeadLetterQueue")), "Arn"}},
				"maxReceiveCount":     5,
			},
		})
	})
}

// TestPriorityQueuesLevels checks custom levels, their options and the
// queue names.
func TestPriorityQueuesLevels(t *testing.T) {
	s := newStack()
	key := awskms.NewKey(s, jsii.String("Key"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
	pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{
		EncryptionKey: key,
		Levels: []sqsinfra.PriorityLevel{
			{Name: "payments", LatencyBudget: secs(2), MaxReceiveCount: jsii.Number(10), QueueName: jsii.String("payments"), Reserved: jsii.Number(4)},
			{Name: "reports", LatencyBudget: awscdk.Duration_Hours(jsii.Number(6))},
		},
	})
	if l := pq.Level("payments"); l == nil || l.Reserved != 4 || l.Priority != 2 || l.Queue.MaxReceiveCount != 10 {
		t.Fatalf("payments level: %+v", l)
	}
	if pq.Level("nope") != nil {
		t.Error("Level of an unknown name")
	}
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "named queue", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{
			"QueueName": "payments", "KmsMasterKeyId": assertions.Match_AnyValue(),
			"RedrivePolicy": assertions.Match_ObjectLike(&map[string]any{"maxReceiveCount": 10}),
		})
	})
	check(t, "dead-letter queue named after it", func() {
		tpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), map[string]any{"QueueName": "payments-dlq"})
	})
	check(t, "6-hour budget", func() {
		tpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), map[string]any{
			"MetricName": "ApproximateAgeOfOldestMessage", "Threshold": 21600,
		})
	})
}

// TestPriorityLambdaConsumer checks one function with an event source per
// level, each with its level's cap, and the reserved concurrency.
func TestPriorityLambdaConsumer(t *testing.T) {
	s := newStack()
	levels := sqsinfra.DefaultPriorityLevels()
	caps := []float64{50, 20, 10, 5}
	for i := range levels {
		levels[i].MaxConcurrency = jsii.Number(caps[i])
	}
	pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: levels})
	c := sqsinfra.NewPriorityLambdaConsumer(s, "C", &sqsinfra.PriorityLambdaConsumerProps{Queues: pq,
		Function: sqsinfra.LambdaConsumerProps{CodeDir: &codeDir, ReservedConcurrency: jsii.Number(85), Timeout: secs(20)}})
	if len(c.EventSourceMappings) != 4 || c.EventSourceMapping != c.EventSourceMappings[0] {
		t.Fatalf("%d event source mappings", len(c.EventSourceMappings))
	}
	tpl := assertions.Template_FromStack(s, nil)
	check(t, "one function, reserved 85", func() {
		tpl.ResourceCountIs(jsii.String("AWS::Lambda::Function"), jsii.Number(1))
		tpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), map[string]any{"ReservedConcurrentExecutions": 85})
	})
	check(t, "four mappings", func() { tpl.ResourceCountIs(jsii.String("AWS::Lambda::EventSourceMapping"), jsii.Number(4)) })
	for i, l := range pq.Levels {
		check(t, l.Name+"'s mapping", func() {
			tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
				"EventSourceArn":        map[string]any{"Fn::GetAtt": []any{assertions.Match_StringLikeRegexp(jsii.String("^P" + l.Name + "Queue")), "Arn"}},
				"ScalingConfig":         map[string]any{"MaximumConcurrency": caps[i]},
				"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
				"BatchSize":             10,
			})
		})
		// Every level's visibility timeout is raised for the function.
		if got := *l.Queue.VisibilityTimeout.ToSeconds(nil); got != 120 {
			t.Errorf("%s: visibility %gs, want 120s", l.Name, got)
		}
	}
	// The role consumes every level and sends to every dead-letter queue.
	got := actionsOn(statementsOf(t, tpl, "CRoleDefaultPolicy"))
	for _, l := range pq.Levels {
		q := `{"Fn::GetAtt":["P` + l.Name + `Queue`
		d := `{"Fn::GetAtt":["P` + l.Name + `DeadLetterQueue`
		var consume, send bool
		for r, actions := range got {
			if strings.HasPrefix(r, q) && strings.Contains(strings.Join(actions, ","), "sqs:ReceiveMessage") {
				consume = true
			}
			if strings.HasPrefix(r, d) && strings.Contains(strings.Join(actions, ","), "sqs:SendMessage") {
				send = true
			}
		}
		if !consume || !send {
			t.Errorf("%s: consume %t, send to DLQ %t", l.Name, consume, send)
		}
	}
}

// TestPriorityPoller checks a PollerService over every level.
func TestPriorityPoller(t *testing.T) {
	s := newStack()
	levels := []sqsinfra.PriorityLevel{{Name: "critical", Reserved: jsii.Number(2)}, {Name: "low"}}
	pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: levels})
	p := sqsinfra.NewPollerService(s, "W", &sqsinfra.PollerServiceProps{PriorityQueues: pq, Image: image(), Handler: handler(),
		JobDuration: secs(1), Concurrency: jsii.Number(10), MinTasks: jsii.Number(0)})
	// critical's 1 s budget against low's hour: its jobs weigh 3,600 times.
	if p.BacklogPerTaskExpression != "MAX([visible0 * 3600, (visible0 + visible1)]) / running" {
		t.Errorf("backlog expression %q", p.BacklogPerTaskExpression)
	}
	// Each level filled: SQS reports nothing of a level idle for six hours,
	// which would otherwise leave the sum, and the alarm, without a value.
	if p.ScaleFromZeroExpression != "IF(FILL(desired, 0) == 0, FILL(visible0, 0) + FILL(inflight0, 0) + FILL(visible1, 0) + FILL(inflight1, 0), 0)" {
		t.Errorf("scale from zero %q", p.ScaleFromZeroExpression)
	}
	// A dashboard of the poller graphs that expression with every level's
	// metric (before, with the first level's only, the graph was an error).
	sqsinfra.NewDashboard(s, "D", &sqsinfra.DashboardProps{Queue: pq.Levels[0].Queue, Poller: p})
	var body []byte
	for _, r := range resourcesOf(assertions.Template_FromStack(s, nil), "AWS::CloudWatch::Dashboard") {
		body, _ = json.Marshal(props(r)["DashboardBody"])
	}
	for _, want := range []string{`MAX([visible0 * 3600, (visible0 + visible1)]) / running`, `\"id\":\"visible0\"`, `\"id\":\"visible1\"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the dashboard's body does not hold %s: %s", want, body)
		}
	}
	// The longest budget (low's hour): 3600 / 2 / 1 s × 10.
	if p.BacklogPerTaskTarget != 18000 {
		t.Errorf("target %g, want 18000", p.BacklogPerTaskTarget)
	}
	tpl := assertions.Template_FromStack(s, nil)
	var task map[string]any
	for _, r := range resourcesOf(tpl, "AWS::ECS::TaskDefinition") {
		task = props(r)
	}
	defs, _ := json.Marshal(task["ContainerDefinitions"])
	for _, want := range []string{
		`"Command":["run","--queue",{"Fn::Join":[":",[{"Fn::GetAtt":["PcriticalQueue`, `"QueueName"]},"2:2"]]},"--queue",{"Fn::Join":[":",[{"Fn::GetAtt":["PlowQueue`,
		`"QueueName"]},"1:0"]]},"--http","http://127.0.0.1:8080/jobs"`,
		`"Name":"QUEUE_URL_CRITICAL"`, `"Name":"DEAD_LETTER_QUEUE_URL_LOW"`,
	} {
		if !strings.Contains(string(defs), want) {
			t.Errorf("container definitions lack %s:\n%s", want, defs)
		}
	}
	if strings.Contains(string(defs), `"Name":"QUEUE_URL"`) {
		t.Error("QUEUE_URL with PriorityQueues")
	}
	got := actionsOn(statementsOf(t, tpl, "WTaskDefinitionTaskRoleDefaultPolicy"))
	for _, prefix := range []string{`{"Fn::GetAtt":["PcriticalQueue`, `{"Fn::GetAtt":["PlowQueue`, `{"Fn::GetAtt":["PlowDeadLetterQueue`} {
		found := false
		for r := range got {
			found = found || strings.HasPrefix(r, prefix)
		}
		if !found {
			t.Errorf("task role has nothing on %s…: %v", prefix, got)
		}
	}
}

func TestPriorityInvalidProps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(s awscdk.Stack)
		want  []string
	}{
		{"custom level without budget", func(s awscdk.Stack) {
			sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{{Name: "urgent"}}})
		}, []string{`PriorityQueues "P"`, `Levels[0] ("urgent") needs a LatencyBudget`}},
		{"bad and duplicate names", func(s awscdk.Stack) {
			sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{{Name: "High"}, {Name: "low"}, {Name: "low"}}})
		}, []string{`Levels[0].Name must be 1 to 20 lowercase letters`, `Levels[2].Name "low" is used twice`}},
		{"no levels", func(s awscdk.Stack) {
			sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{}})
		}, []string{"Levels must hold 1 to 10 levels, got 0"}},
		{"fractional budget", func(s awscdk.Stack) {
			sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{{Name: "critical", LatencyBudget: awscdk.Duration_Millis(jsii.Number(500))}}})
		}, []string{`PriorityQueues "P": level "critical"`, "LatencyBudget must be whole seconds, at least 1s, got 0.5s"}},
		{"negative reserved", func(s awscdk.Stack) {
			sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{{Name: "critical", Reserved: jsii.Number(-1)}}})
		}, []string{"Levels[0].Reserved must be a whole number >= 0, got -1"}},
		{"max concurrency out of range", func(s awscdk.Stack) {
			l := sqsinfra.DefaultPriorityLevels()
			l[3].MaxConcurrency = jsii.Number(1)
			pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: l})
			sqsinfra.NewPriorityLambdaConsumer(s, "C", &sqsinfra.PriorityLambdaConsumerProps{Queues: pq, Function: sqsinfra.LambdaConsumerProps{CodeDir: &codeDir}})
		}, []string{`PriorityLambdaConsumer "C"`, `level "low"'s MaxConcurrency must be a whole number from 2 to 1000`}},
		{"reserved below the sum", func(s awscdk.Stack) {
			l := sqsinfra.DefaultPriorityLevels()
			for i := range l {
				l[i].MaxConcurrency = jsii.Number(10)
			}
			pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: l})
			sqsinfra.NewPriorityLambdaConsumer(s, "C", &sqsinfra.PriorityLambdaConsumerProps{Queues: pq, Function: sqsinfra.LambdaConsumerProps{CodeDir: &codeDir, ReservedConcurrency: jsii.Number(30)}})
		}, []string{"ReservedConcurrency (30) must be at least the sum of the levels' MaxConcurrency (40)"}},
		{"reserved with an uncapped level", func(s awscdk.Stack) {
			l := sqsinfra.DefaultPriorityLevels()
			l[0].MaxConcurrency = jsii.Number(10)
			pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: l})
			sqsinfra.NewPriorityLambdaConsumer(s, "C", &sqsinfra.PriorityLambdaConsumerProps{Queues: pq, Function: sqsinfra.LambdaConsumerProps{CodeDir: &codeDir, ReservedConcurrency: jsii.Number(100)}})
		}, []string{"ReservedConcurrency (100) needs a MaxConcurrency on every level"}},
		{"function with a queue", func(s awscdk.Stack) {
			pq := sqsinfra.NewPriorityQueues(s, "P", nil)
			sqsinfra.NewPriorityLambdaConsumer(s, "C", &sqsinfra.PriorityLambdaConsumerProps{Queues: pq, Function: sqsinfra.LambdaConsumerProps{
				CodeDir: &codeDir, Queue: pq.Levels[0].Queue, MaxConcurrency: jsii.Number(5)}})
		}, []string{"Function.Queue must be nil", "Function.MaxConcurrency must be nil"}},
		{"level maxReceiveCount under 5 with Lambda", func(s awscdk.Stack) {
			pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{{Name: "high", MaxReceiveCount: jsii.Number(2)}}})
			sqsinfra.NewPriorityLambdaConsumer(s, "C", &sqsinfra.PriorityLambdaConsumerProps{Queues: pq, Function: sqsinfra.LambdaConsumerProps{CodeDir: &codeDir}})
		}, []string{`level "high": the queue's MaxReceiveCount (2) must be at least 5`}},
		{"no queues", func(s awscdk.Stack) {
			sqsinfra.NewPriorityLambdaConsumer(s, "C", nil)
		}, []string{"Queues is required"}},
		{"poller with both", func(s awscdk.Stack) {
			pq := sqsinfra.NewPriorityQueues(s, "P", nil)
			sqsinfra.NewPollerService(s, "W", &sqsinfra.PollerServiceProps{PriorityQueues: pq, Queue: pq.Levels[0].Queue, Image: image(), Handler: handler()})
		}, []string{"give Queue or PriorityQueues, not both"}},
		// The worker would refuse both at start, and the service restart
		// it for ever.
		{"poller whose levels reserve more than its concurrency", func(s awscdk.Stack) {
			pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{
				{Name: "critical", Reserved: jsii.Number(8)}, {Name: "normal", Reserved: jsii.Number(4)}}})
			sqsinfra.NewPollerService(s, "W", &sqsinfra.PollerServiceProps{PriorityQueues: pq, Image: image(), Handler: handler()})
		}, []string{"the priority levels reserve 12 slots in all but Concurrency is 10"}},
		{"poller whose levels reserve its whole concurrency", func(s awscdk.Stack) {
			pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: []sqsinfra.PriorityLevel{
				{Name: "critical", Reserved: jsii.Number(10)}, {Name: "low"}}})
			sqsinfra.NewPollerService(s, "W", &sqsinfra.PollerServiceProps{PriorityQueues: pq, Image: image(), Handler: handler()})
		}, []string{`level "low", which reserves none, would never run`}},
		{"poller from zero with 5 levels", func(s awscdk.Stack) {
			pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: append(sqsinfra.DefaultPriorityLevels(),
				sqsinfra.PriorityLevel{Name: "bulk", LatencyBudget: awscdk.Duration_Hours(jsii.Number(4))})})
			sqsinfra.NewPollerService(s, "W", &sqsinfra.PollerServiceProps{PriorityQueues: pq, Image: image(), Handler: handler(), MinTasks: jsii.Number(0)})
		}, []string{"MinTasks 0 with 5 levels", "at most 10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := panics(func() { tc.build(newStack()) })
			if msg == "" {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

// A weight of a million or more is written in full, not in exponent form
// (1.0368e+06), which CloudWatch's metric math does not document.
func TestPriorityPollerLargeWeight(t *testing.T) {
	s := newStack()
	levels := []sqsinfra.PriorityLevel{{Name: "critical"},
		{Name: "archive", LatencyBudget: awscdk.Duration_Days(jsii.Number(12)), RetentionPeriod: awscdk.Duration_Days(jsii.Number(13))}}
	pq := sqsinfra.NewPriorityQueues(s, "P", &sqsinfra.PriorityQueuesProps{Levels: levels})
	p := sqsinfra.NewPollerService(s, "W", &sqsinfra.PollerServiceProps{PriorityQueues: pq, Image: image(), Handler: handler()})
	if want := "MAX([visible0 * 1036800, (visible0 + visible1)]) / running"; p.BacklogPerTaskExpression != want {
		t.Errorf("backlog expression %q, want %q", p.BacklogPerTaskExpression, want)
	}
}

// A poller with a Command of its own over a queue of visibility timeout 0
// is taken: its command may pass --visibility-timeout; only the default
// command, which takes the queue's, is refused.
func TestPollerCommandOverAQueueWithoutVisibility(t *testing.T) {
	s := newStack()
	q := sqsinfra.NewJobQueue(s, "Q", &sqsinfra.JobQueueProps{VisibilityTimeout: secs(0)})
	if msg := panics(func() {
		sqsinfra.NewPollerService(s, "W", &sqsinfra.PollerServiceProps{Queue: q, Image: image(),
			Command: []string{"run", "--visibility-timeout", "60s", "--http", "http://127.0.0.1:8080/jobs"}})
	}); msg != "" {
		t.Errorf("a poller with its own command: %s", msg)
	}
}
