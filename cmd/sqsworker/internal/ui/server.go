package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sqsworker/sqsworker/dlq"
)

//go:embed assets
var assets embed.FS

// Defaults of [Config].
const (
	DefaultAddr            = "127.0.0.1:8080"
	DefaultSampleInterval  = 5 * time.Second
	DefaultSampleIdle      = 30 * time.Second
	DefaultSampleWindow    = 10 * time.Minute
	DefaultScanMax         = 1000
	DefaultJobRetention    = time.Hour
	DefaultMaxFinishedJobs = 100
)

// MaxScanMax is the most messages one listing or one dry run may read:
// the bound of [Config.ScanMax] and of a request's max. A listing holds
// the messages it reads invisible while it runs (SQS has no peek), and
// the page shows them all; the dlq commands, with filters, have no such
// bound.
const MaxScanMax = 10_000

// Config is how [New] makes a server.
type Config struct {
	// Addr is the address the server is bound to, host:port; it decides
	// whether a Token is required. Default [DefaultAddr].
	Addr string
	// Token is the access token: when set, every request must carry it
	// (the ?token= of the address printed at start, kept in a cookie, or
	// an Authorization: Bearer header). Required when Addr is not a
	// loopback address. Default "": none.
	Token string
	// AllowActions enables replay and purge. Default false: read-only,
	// every POST is refused.
	AllowActions bool
	// SQS is the client of the dead-letter queue operations; purge needs
	// it to implement [dlq.Purger] too. Required.
	SQS dlq.API
	// Stats reads the figures of the queues shown. Required.
	Stats func(context.Context) ([]QueueStats, error)
	// Listed says that Stats lists the queues (ListQueues) at each
	// reading, for the cost the page shows. Default false.
	Listed bool
	// Audit records every replayed message and every purge. Default: the
	// zero dlq.Audit, which records nothing; give one.
	Audit dlq.Audit
	// AuditFile is the JSON-lines file the audit log is appended to, which
	// the audit page reads. Default "": the page says there is none to show.
	AuditFile string
	// Force opens queues that do not look like dead-letter queues (see
	// [dlq.Config.Force]). Default false.
	Force bool
	// SampleInterval is how often the figures are read while a page polls
	// them. Default [DefaultSampleInterval].
	SampleInterval time.Duration
	// SampleIdle is how long after a page's last poll sampling stops.
	// Default [DefaultSampleIdle].
	SampleIdle time.Duration
	// SampleWindow is how far back the charts go. Default
	// [DefaultSampleWindow].
	SampleWindow time.Duration
	// ScanMax bounds the messages a listing reads, and those a dry run
	// plans (the rest wait for another), unless the request asks for
	// another bound (max, up to [MaxScanMax]). A listing or dry run that
	// stops there says so, with the queue's approximate count and how to
	// see more. Default [DefaultScanMax]; more than MaxScanMax is refused.
	ScanMax int
	// JobRetention is how long the status of a finished replay is kept
	// (GET /api/jobs/{id}); after that it answers 410 Gone, pointing to
	// the audit log, which holds the record of every message moved. Jobs
	// under way are always kept. Default [DefaultJobRetention].
	JobRetention time.Duration
	// MaxFinishedJobs is how many finished replays are kept at most: the
	// newest. Default [DefaultMaxFinishedJobs].
	MaxFinishedJobs int
	// Visibility is the visibility timeout of the messages a listing, a
	// dry run or a replay holds. Default [dlq.DefaultVisibility].
	Visibility time.Duration
	// Logger receives a line per request (method, path, status, time: no
	// query, no body) and the errors. Default: slog.Default().
	Logger *slog.Logger
}

// Server is the dashboard. Make one with [New], serve it with
// [Server.Serve].
type Server struct {
	cfg      Config
	loopback bool
	csrf     string
	log      *slog.Logger
	sampler  *sampler
	index    *template.Template
	static   http.Handler

	// base is the context of the replays, cancelled by Serve's end.
	base   context.Context
	cancel context.CancelFunc
	jobsWG sync.WaitGroup
	now    func() time.Time // the clock of jobs (tests set it before serving); plans and opened queues use time.Now

	mu     sync.Mutex
	queues map[string]*knownQueue // by queue ARN (see queueKey)
	plans  map[string]*plan
	jobs   *jobs
}

// New checks cfg and makes a server. A non-loopback Addr without a Token
// is refused.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	if cfg.SampleIdle <= 0 {
		cfg.SampleIdle = DefaultSampleIdle
	}
	if cfg.SampleWindow <= 0 {
		cfg.SampleWindow = DefaultSampleWindow
	}
	if cfg.ScanMax <= 0 {
		cfg.ScanMax = DefaultScanMax
	}
	if cfg.JobRetention <= 0 {
		cfg.JobRetention = DefaultJobRetention
	}
	if cfg.MaxFinishedJobs <= 0 {
		cfg.MaxFinishedJobs = DefaultMaxFinishedJobs
	}
	if cfg.Visibility == 0 {
		cfg.Visibility = dlq.DefaultVisibility
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var errs []error
	if cfg.SQS == nil {
		errs = append(errs, errors.New("no SQS client"))
	}
	if cfg.Stats == nil {
		errs = append(errs, errors.New("no Stats function"))
	}
	if cfg.ScanMax > MaxScanMax {
		errs = append(errs, fmt.Errorf("scan max %d: want 1 to %d", cfg.ScanMax, MaxScanMax))
	}
	loopback, err := IsLoopback(cfg.Addr)
	if err != nil {
		errs = append(errs, err)
	} else if !loopback && cfg.Token == "" {
		errs = append(errs, fmt.Errorf("address %s is not a loopback address: anyone who reaches it could read the dead-letter queues; give an access token (--token), or bind 127.0.0.1", cfg.Addr))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("ui: %w", errors.Join(errs...))
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	index, err := template.ParseFS(sub, "index.html")
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	s := &Server{
		cfg: cfg, loopback: loopback, csrf: RandomToken(), log: cfg.Logger, index: index,
		static:  http.StripPrefix("/static/", http.FileServerFS(sub)),
		sampler: newSampler(cfg.Stats, cfg.SampleInterval, cfg.SampleIdle, cfg.SampleWindow),
		queues:  map[string]*knownQueue{}, plans: map[string]*plan{},
		jobs: newJobs(cfg.JobRetention, cfg.MaxFinishedJobs), now: time.Now,
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// RandomToken returns 32 random bytes in hex: a token for [Config.Token].
func RandomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// IsLoopback reports whether the host of addr (host:port) is a loopback
// address or "localhost". An empty host (all interfaces) is not.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("address %q: want host:port, such as 127.0.0.1:8080: %w", addr, err)
	}
	return isLoopbackHost(host), nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// RequestsPerMinute is what sampling costs while a page is open, in SQS
// requests per minute, for queues queues of which withDLQ have a
// dead-letter queue, and listed (a prefix: ListQueues at each reading).
func RequestsPerMinute(interval time.Duration, queues, withDLQ int, listed bool) float64 {
	per := float64(queues + withDLQ)
	if listed {
		per++
	}
	return per * float64(time.Minute) / float64(interval)
}

// Serve serves on ln until ctx ends, then shuts down gracefully: requests
// under way get up to 10 seconds, a replay under way stops between two
// messages (nothing is lost: a message is copied before it is deleted).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A listing reads up to ScanMax messages (a request may ask up to
		// MaxScanMax) and a dry run as many.
		WriteTimeout:   5 * time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	sctx, stopSampler := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sampler.run(sctx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = hs.Shutdown(sctx)
		cancel()
		<-errc
	}
	stopSampler()
	s.mu.Lock() // no replay starts after this (see handleReplay)
	s.cancel()
	s.mu.Unlock()
	wg.Wait()
	s.jobsWG.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Handler returns the server's routes, behind its checks.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.handleIndex)
	mux.Handle("GET /static/", s.static)
	mux.HandleFunc("GET /api/queues", s.handleQueues)
	mux.HandleFunc("GET /api/dlq/messages", s.handleList)
	mux.HandleFunc("GET /api/dlq/message", s.handleMessage)
	mux.HandleFunc("GET /api/audit", s.handleAudit)
	mux.HandleFunc("GET /api/jobs/{id}", s.handleJob)
	mux.HandleFunc("POST /api/dlq/plan", s.handlePlan)
	mux.HandleFunc("POST /api/dlq/replay", s.handleReplay)
	mux.HandleFunc("POST /api/dlq/purge", s.handlePurge)
	return s.logRequests(s.checkHost(s.authenticate(s.isolateAPI(s.guardActions(mux)))))
}

// statusWriter remembers the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// logRequests logs each request's method, path (never its query, which
// may hold filter text), status and duration, and sets the headers every
// response has.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// Another site's page that opened this one keeps no handle on it
		// (to set its address), nor embeds its answers.
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		s.log.Info("http", "method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start).Round(time.Millisecond))
	})
}

// checkHost refuses, on a loopback address, a Host header that is not a
// loopback name: a page of another site whose name was made to resolve to
// 127.0.0.1 (DNS rebinding) would send its own.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.loopback {
			host := r.Host
			if h, _, err := net.SplitHostPort(r.Host); err == nil {
				host = h
			}
			if !isLoopbackHost(host) {
				http.Error(w, "forbidden: this server answers only to a loopback host name (127.0.0.1, localhost)", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

const tokenCookie = "sqsworker_ui_token"

// authenticate requires the access token, when there is one: from the
// cookie, an Authorization: Bearer header, or ?token= (which sets the
// cookie and redirects to the address without it).
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && equal(t, s.cfg.Token) {
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: s.cfg.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			// To a path of this server: "//host/…" (or a backslash, which
			// browsers read as a slash) would send the browser to another host.
			q := r.URL.Query()
			q.Del("token")
			to := "/" + strings.TrimLeft(r.URL.EscapedPath(), "/\\")
			if len(q) > 0 {
				to += "?" + q.Encode()
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		ok := false
		if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value, s.cfg.Token) {
			ok = true
		}
		if t, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && equal(t, s.cfg.Token) {
			ok = true
		}
		if !ok {
			http.Error(w, "unauthorized: open the address with ?token=… that sqsworker ui printed when it started", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// equal compares secrets in constant time.
func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// guardActions refuses every request that is not a GET or HEAD in
// read-only mode, and otherwise one without the server's CSRF token, from
// another origin, or not JSON.
func (s *Server) guardActions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if !s.cfg.AllowActions {
			writeError(w, http.StatusForbidden, "read-only: this server was started without --allow-actions")
			return
		}
		if msg := s.csrfProblem(r); msg != "" {
			writeError(w, http.StatusForbidden, "forbidden: "+msg)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		next.ServeHTTP(w, r)
	})
}

// isolateAPI refuses an API request that a browser says comes from
// another site or origin (Fetch Metadata, Origin), GETs included: another
// site's page cannot read the answers, but a listing it triggered (an
// <img>, a no-cors fetch) would receive every message of the queue,
// raising their receive counts, and the figures cost SQS requests. The
// page itself, a link to it and tools that send no such header pass.
func (s *Server) isolateAPI(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			if msg := crossOrigin(r); msg != "" {
				writeError(w, http.StatusForbidden, "forbidden: "+msg)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// crossOrigin says why r comes from another origin, or "".
func crossOrigin(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return "request from another origin"
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return "request from another site"
	}
	return ""
}

func (s *Server) csrfProblem(r *http.Request) string {
	if !equal(r.Header.Get("X-CSRF-Token"), s.csrf) {
		return "missing or wrong CSRF token (reload the page)"
	}
	if msg := crossOrigin(r); msg != "" {
		return msg
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return "want Content-Type application/json"
	}
	return ""
}

func (s *Server) handleIndex(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	// Opened from another site's link: the page reads no dead-letter queue
	// until the operator asks (a listing receives the messages).
	site := r.Header.Get("Sec-Fetch-Site")
	crossSite := site == "cross-site" || site == "same-site"
	err := s.index.Execute(&b, map[string]any{"CSRF": s.csrf, "Actions": s.cfg.AllowActions, "AuditFile": s.cfg.AuditFile != "", "CrossSite": crossSite})
	if err != nil {
		s.log.Error("rendering the page", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	snap := s.sampler.poll(ctx)
	s.mu.Lock()
	for i, q := range snap.Queues {
		if q.DLQ == nil {
			continue
		}
		for _, k := range s.queues {
			if k.at(q.DLQ.URL) {
				snap.Queues[i].OldestFailure = k.oldest
				break
			}
		}
	}
	s.mu.Unlock()
	withDLQ := 0
	for _, q := range snap.Queues {
		if q.DLQ != nil && !q.DLQ.Missing {
			withDLQ++
		}
	}
	writeJSON(w, http.StatusOK, struct {
		snapshot
		RequestsPerMinute float64 `json:"requestsPerMinute"`
	}{snap, RequestsPerMinute(s.cfg.SampleInterval, len(snap.Queues), withDLQ, s.cfg.Listed)})
}
