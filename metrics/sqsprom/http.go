package sqsprom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultAddr is where Serve listens when given no address: the loopback
// interface only. In a container, pass ":9090" to be reached from outside.
const DefaultAddr = "127.0.0.1:9090"

// Paths that Handler serves.
const (
	MetricsPath = "/metrics"
	HealthPath  = "/healthz"
	ReadyPath   = "/readyz"
)

// shutdownGrace is how long Serve lets requests under way finish once its
// context has ended.
const shutdownGrace = 5 * time.Second

// Handler returns the HTTP handler of a poller's metrics and probes:
//
//   - /metrics: the metrics of reg in the Prometheus exposition format
//     (promhttp); nil means prometheus.DefaultGatherer;
//   - /healthz: 200 while the process serves it: a liveness probe;
//   - /readyz: 200 while ready() is true, 503 otherwise: a readiness probe;
//     pass the Ready method of a worker.Worker. A nil ready is always true.
//
// Other paths get 404.
func Handler(reg prometheus.Gatherer, ready func() bool) http.Handler {
	if reg == nil {
		reg = prometheus.DefaultGatherer
	}
	if ready == nil {
		ready = func() bool { return true }
	}
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc(HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		probe(w, http.StatusOK, "ok")
	})
	mux.HandleFunc(ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if ready() {
			probe(w, http.StatusOK, "ready")
		} else {
			probe(w, http.StatusServiceUnavailable, "not ready")
		}
	})
	return mux
}

func probe(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, body)
}

// Serve listens on addr (DefaultAddr, 127.0.0.1:9090, when empty) and serves
// h until ctx ends; then it lets the requests under way finish, for up to 5
// seconds, and returns nil. It returns an error at once when it cannot
// listen, and when serving fails.
//
// To keep /metrics and /readyz answering while a worker shuts down, give
// Serve a context that ends after the worker's Run has returned, not the
// one that stops the worker.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	if addr == "" {
		addr = DefaultAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("sqsprom: %w", err)
	}
	return ServeListener(ctx, ln, h)
}

// ServeListener is Serve on a listener of the caller's, such as one on port
// 0 whose address a test reads. It closes ln.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("sqsprom: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		_ = srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("sqsprom: %w", err)
	}
	return nil
}
