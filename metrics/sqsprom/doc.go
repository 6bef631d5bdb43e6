// Package sqsprom exports the metrics of the sqsworker runtimes to
// Prometheus, and serves them with liveness and readiness probes for pollers
// that run in containers (ECS, Kubernetes).
//
// It is a module of its own, github.com/sqsworker/sqsworker/metrics/sqsprom,
// so that users of the library who do not use Prometheus never download its
// client. Its package name is sqsprom, not prometheus, so as not to shadow
// the client's package:
//
//	import (
//		"github.com/prometheus/client_golang/prometheus"
//		sqsprom "github.com/sqsworker/sqsworker/metrics/sqsprom"
//	)
//
// [New] returns a [Recorder], a metrics.Recorder to put in worker.Config's
// Metrics (or lambda.Config's). It turns the vocabulary of package metrics
// into Prometheus metrics named after it under the namespace "sqsworker":
// counters as sqsworker_<name>_total, histograms as
// sqsworker_<name>_seconds, gauges as sqsworker_<name>, such as
// sqsworker_messages_failed_total{queue, handler, error_class},
// sqsworker_handler_duration_seconds{queue, handler} and
// sqsworker_queue_visible{queue}. Each metric has the labels that its row of
// the table in package metrics lists, which are all low-cardinality.
//
// The queue depth gauges (queue_visible, queue_in_flight, queue_delayed,
// dlq_visible) are polled by the worker every Config.MetricsInterval (60s by
// default); Prometheus scrapes the last value.
//
// Several workers of a process may record into one registry, each with a
// Recorder of its own: counters and histograms add up, in_flight is the sum
// of the workers' handlers, breaker_state the greatest of their breakers'
// states (0 closed, 1 open, 2 half-open), and the depth gauges the queue's
// last reading. Label values are bounded: cleaned to printable ASCII of at
// most 256 bytes, and at most 20 distinct error classes per Recorder, the
// rest counted under error_class="other" (see package metrics).
//
// [Handler] serves /metrics, /healthz and /readyz; [Serve] runs it on an
// address until a context ends. A poller puts them together:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
//	w, err := worker.New(client, worker.Config{
//		QueueURL: queueURL,
//		Metrics:  sqsprom.New(reg, sqsprom.Options{}),
//	})
//	if err != nil {
//		return err
//	}
//	srvCtx, stopServer := context.WithCancel(context.Background())
//	defer stopServer()
//	go sqsprom.Serve(srvCtx, ":9090", sqsprom.Handler(reg, w.Ready))
//	return w.Run(ctx, handler) // /readyz turns 503 as the shutdown starts
//
// The server outlives the worker's shutdown on purpose: while the worker
// drains, /readyz says 503 and /metrics still answers.
package sqsprom
