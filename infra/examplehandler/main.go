// Command examplehandler is the HTTP job handler of the example app's
// PollerService: the container that `sqsworker run --http` POSTs each
// message to, over the task's localhost. It is a module of its own, on the
// standard library only, so that its image (the Dockerfile next to it,
// built by `cdk deploy`) downloads nothing, and so that its copy in
// cdk.out is not a package of infra's module; infra's tests vet and test
// it (exampleapp.TestExampleHandlerModule).
//
// Like cmd/example-lambda (which consumes the same queue in the example
// stack), the jobs say in their body what to do, so that every outcome can
// be seen: "ok", "fail" (500, retried), "permanent" (422, to the
// dead-letter queue at once), "panic" (500), "retry-after:DURATION" (503
// with Retry-After, retried later and never dead-lettered),
// "sleep:DURATION" (then done) and "fail-until:N" (500 until the N-th
// attempt, from X-Sqs-Receive-Count). Anything else is permanent.
//
//	examplehandler [-addr :8080]   serve POST /jobs and GET /healthz
//	examplehandler -healthcheck    exit 0 if the local server answers /healthz (the container's health check)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxBody is the largest body read: SQS's largest message.
const maxBody = 1 << 20

func main() {
	addr := flag.String("addr", ":8080", "address to listen on")
	check := flag.Bool("healthcheck", false, "check the server listening on -addr and exit 0 if it is healthy, 1 otherwise")
	flag.Parse()
	if *check {
		if err := healthcheck(*addr); err != nil {
			fmt.Fprintln(os.Stderr, "examplehandler:", err)
			os.Exit(1)
		}
		return
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serve(ctx, *addr, logger); err != nil {
		logger.Error("examplehandler stopped", "error", err)
		os.Exit(1)
	}
}

// serve serves handler on addr until ctx ends, then lets the requests under
// way finish (ECS stops the worker container, which depends on this one,
// first).
func serve(ctx context.Context, addr string, logger *slog.Logger) error {
	srv := &http.Server{Addr: addr, Handler: handler(logger), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe() }()
	logger.Info("examplehandler listening", "addr", addr)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// healthcheck GETs /healthz from the server listening on addr.
func healthcheck(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s", resp.Status)
	}
	return nil
}

func handler(logger *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /jobs", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		attempt, _ := strconv.Atoi(r.Header.Get("X-Sqs-Receive-Count"))
		status, retryAfter, reason := run(r.Context(), string(body), attempt)
		logger.Info("job", "message_id", r.Header.Get("X-Sqs-Message-Id"), "job_key", r.Header.Get("X-Sqs-Job-Key"), "attempt", attempt, "status", status, "reason", reason)
		if retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
		}
		if status == http.StatusNoContent {
			w.WriteHeader(status)
			return
		}
		http.Error(w, reason, status)
	})
	return mux
}

// run does the job body says and returns the response's status, the delay
// of a 503's Retry-After, and a reason.
func run(ctx context.Context, body string, attempt int) (status int, retryAfter time.Duration, reason string) {
	verb, arg, _ := strings.Cut(strings.TrimSpace(body), ":")
	switch verb {
	case "ok":
		return http.StatusNoContent, 0, "done"
	case "fail":
		return http.StatusInternalServerError, 0, "upstream unavailable"
	case "panic":
		return http.StatusInternalServerError, 0, "job exploded"
	case "permanent":
		return http.StatusUnprocessableEntity, 0, "malformed job"
	case "retry-after":
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			return http.StatusUnprocessableEntity, 0, fmt.Sprintf("bad duration %q", arg)
		}
		return http.StatusServiceUnavailable, d, "rate limited"
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return http.StatusUnprocessableEntity, 0, fmt.Sprintf("bad duration %q", arg)
		}
		select {
		case <-time.After(d):
			return http.StatusNoContent, 0, "done"
		case <-ctx.Done():
			return http.StatusServiceUnavailable, 0, "interrupted: " + context.Cause(ctx).Error()
		}
	case "fail-until":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return http.StatusUnprocessableEntity, 0, fmt.Sprintf("bad attempt count %q", arg)
		}
		if attempt < n {
			return http.StatusInternalServerError, 0, fmt.Sprintf("attempt %d of %d", attempt, n)
		}
		return http.StatusNoContent, 0, "done"
	}
	return http.StatusUnprocessableEntity, 0, fmt.Sprintf("unknown job %q", verb)
}
