package sqsprom_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	sqsprom "github.com/sqsworker/sqsworker/metrics/sqsprom"
	"github.com/sqsworker/sqsworker/worker"
)

// A Recorder turns the measurements of the runtimes into Prometheus metrics,
// which Handler serves on /metrics.
func Example() {
	reg := prometheus.NewRegistry()
	rec := sqsprom.New(reg, sqsprom.Options{})

	jobs := metrics.Dims{Queue: "jobs", Handler: "email"}
	rec.Add(metrics.MessagesSucceeded, 3, jobs)
	rec.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "jobs", Handler: "email", ErrorClass: "timeout"})
	rec.Observe(metrics.HandlerDuration, 0.25, jobs)
	rec.Set(metrics.QueueVisible, 12, jobs) // queue_visible has no handler label

	// Scrape /metrics, and print the samples without the histogram's buckets.
	w := httptest.NewRecorder()
	sqsprom.Handler(reg, nil).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		if line := sc.Text(); !strings.HasPrefix(line, "#") && !strings.Contains(line, "_bucket{") {
			fmt.Println(line)
		}
	}
	// Output:
	// sqsworker_handler_duration_seconds_sum{handler="email",queue="jobs"} 0.25
	// sqsworker_handler_duration_seconds_count{handler="email",queue="jobs"} 1
	// sqsworker_messages_failed_total{error_class="timeout",handler="email",queue="jobs"} 1
	// sqsworker_messages_succeeded_total{handler="email",queue="jobs"} 3
	// sqsworker_queue_visible{queue="jobs"} 12
}

// A poller on ECS: the worker records into a registry that Serve exposes,
// with /readyz following the worker's Ready. The server is stopped after
// the worker, so that /metrics answers while the worker drains.
func ExampleServe() {
	ctx := context.Background() // in a real poller: cancelled on SIGTERM
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := worker.New(sqs.NewFromConfig(cfg), worker.Config{
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
		Metrics:  sqsprom.New(reg, sqsprom.Options{}),
	})
	if err != nil {
		log.Fatal(err)
	}
	srvCtx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- sqsprom.Serve(srvCtx, ":9090", sqsprom.Handler(reg, w.Ready)) }()

	err = w.Run(ctx, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return nil // handle the job
	}))
	stopServer()
	if serr := <-served; serr != nil {
		log.Print(serr)
	}
	if err != nil {
		log.Fatal(err)
	}
}
