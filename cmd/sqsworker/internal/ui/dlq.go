package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sqsworker/sqsworker/cmd/sqsworker/internal/brief"
	"github.com/sqsworker/sqsworker/dlq"
)

// knownQueue is a dead-letter queue requests have opened, kept by its ARN
// for as long as the server runs: one per queue, however a request names
// it (name, URL, ARN), so that the queues kept grow with the queues of
// the account, not with the texts asked, and one lock guards each queue.
// Under Server.mu.
type knownQueue struct {
	q      *dlq.Queue // as last opened; opened again after openFor
	opened time.Time
	named  bool // opened by a plain name, which then stands for it
	lock   *queueLock
	// oldest is the oldest failure its last complete listing saw; zero
	// when it saw none.
	oldest time.Time
}

// queueLock lets one operation at a time hold a queue's messages.
type queueLock struct {
	busy chan struct{} // one token: held by a listing, a dry run, a replay or a purge
	what string        // what holds it, under Server.mu
}

// openQueue is a dead-letter queue as a request opened it, with the lock
// of that queue.
type openQueue struct {
	q    *dlq.Queue
	lock *queueLock
}

const openFor = time.Minute

// open opens the dead-letter queue given by name, URL or ARN, or returns
// the one opened by it in the last minute.
func (s *Server) open(ctx context.Context, nameOrURL string) (*openQueue, error) {
	if nameOrURL == "" {
		return nil, badRequest("no queue given")
	}
	s.mu.Lock()
	if k := s.knownAs(nameOrURL); k != nil && time.Since(k.opened) < openFor {
		oq := &openQueue{q: k.q, lock: k.lock}
		s.mu.Unlock()
		return oq, nil
	}
	s.mu.Unlock()
	q, err := dlq.Open(ctx, s.cfg.SQS, nameOrURL, dlq.Config{Force: s.cfg.Force, Logger: s.log})
	if err != nil {
		if errors.Is(err, dlq.ErrNotDeadLetterQueue) || errors.Is(err, dlq.ErrCannotCheck) {
			return nil, badRequest(err.Error() + " (start sqsworker ui with --force to act on it anyway)")
		}
		return nil, err
	}
	named := !strings.Contains(nameOrURL, "/") && !strings.HasPrefix(nameOrURL, "arn:")
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.queues[queueKey(q)]
	if k == nil {
		k = &knownQueue{lock: &queueLock{busy: make(chan struct{}, 1)}}
		s.queues[queueKey(q)] = k
	}
	k.q, k.opened, k.named = q, time.Now(), k.named || named // keep its lock
	return &openQueue{q: q, lock: k.lock}, nil
}

// queueKey is the key of q in Server.queues: its ARN, or its URL when SQS
// gave no ARN.
func queueKey(q *dlq.Queue) string {
	if q.ARN != "" {
		return q.ARN
	}
	return q.URL
}

// knownAs returns the queue kept that nameOrURL names: its URL, its ARN,
// or, when it was opened by a plain name, that name (a plain name stands
// for a queue of the server's own account; a queue opened by the URL of
// another account's may have the same name). Nil when none is kept. Under
// Server.mu.
func (s *Server) knownAs(nameOrURL string) *knownQueue {
	for _, k := range s.queues {
		if k.q.URL == nameOrURL || k.q.ARN == nameOrURL || (k.named && k.q.Name == nameOrURL) {
			return k
		}
	}
	return nil
}

// at reports whether url is k's queue: its URL as last opened, or a URL
// whose path ends in the account and name of its ARN (the queues page's
// figures may name it by another URL than a request did).
func (k *knownQueue) at(url string) bool {
	if k.q.URL == url {
		return true
	}
	arn, err := dlq.ParseARN(k.q.ARN)
	return err == nil && strings.HasSuffix(url, "/"+arn.Account+"/"+arn.Name)
}

// hold takes the queue's lock, waiting for a listing or a dry run, not for
// a replay.
func (s *Server) hold(ctx context.Context, oq *openQueue, what string) (release func(), err error) {
	l := oq.lock
	held := func() (func(), error) {
		s.mu.Lock()
		l.what = what
		s.mu.Unlock()
		return func() { <-l.busy }, nil
	}
	for {
		select {
		case l.busy <- struct{}{}:
			return held()
		default:
		}
		s.mu.Lock()
		holder := l.what
		s.mu.Unlock()
		if holder == "replay" {
			return nil, &httpError{http.StatusConflict, "a replay of this queue is under way: wait for its end"}
		}
		select {
		case l.busy <- struct{}{}:
			return held()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// filterParams is a filter as the page sends it.
type filterParams struct {
	Classes []string `json:"classes"`
	Attrs   []string `json:"attrs"` // name=value
	Since   string   `json:"since"` // RFC 3339 or "2h ago"
	Until   string   `json:"until"`
	Text    string   `json:"text"` // body contains
}

func (p filterParams) filter(now time.Time) (dlq.Filter, error) {
	var f dlq.Filter
	var errs []error
	for _, c := range p.Classes {
		if c = strings.TrimSpace(c); c != "" {
			f.ErrorClasses = append(f.ErrorClasses, c)
		}
	}
	for _, a := range p.Attrs {
		if strings.TrimSpace(a) == "" {
			continue
		}
		name, value, ok := strings.Cut(a, "=")
		if !ok || strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("attribute %q: want name=value", a))
			continue
		}
		f.Attributes = append(f.Attributes, dlq.Attribute{Name: strings.TrimSpace(name), Value: value})
	}
	var err error
	if strings.TrimSpace(p.Since) != "" {
		if f.Since, err = dlq.ParseTime(p.Since, now); err != nil {
			errs = append(errs, fmt.Errorf("since: %w", err))
		}
	}
	if strings.TrimSpace(p.Until) != "" {
		if f.Until, err = dlq.ParseTime(p.Until, now); err != nil {
			errs = append(errs, fmt.Errorf("until: %w", err))
		}
	}
	f.BodyContains = p.Text
	if len(errs) == 0 {
		if err := f.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return dlq.Filter{}, badRequest(errors.Join(errs...).Error())
	}
	return f, nil
}

// listItem is a dead-letter message in a listing: its failure metadata,
// never its body nor its attributes.
type listItem struct {
	ID            string    `json:"id"`
	OriginalID    string    `json:"originalId"`
	HasFailure    bool      `json:"hasFailure"`
	ErrorClass    string    `json:"errorClass"`
	Error         string    `json:"error"`
	Attempts      int       `json:"attempts"`
	FirstReceived time.Time `json:"firstReceived,omitzero"`
	FailedAt      time.Time `json:"failedAt,omitzero"`
	SourceQueue   string    `json:"sourceQueue"`
	Host          string    `json:"host,omitempty"`
	GroupID       string    `json:"groupId,omitempty"`
	Replays       int       `json:"replays,omitempty"`
	Unverified    string    `json:"unverified,omitempty"`
}

func newListItem(m *dlq.Message) listItem {
	f := m.Failure
	return listItem{
		ID: m.ID, OriginalID: m.OriginalID(), HasFailure: m.HasFailure,
		ErrorClass: f.ErrorClass, Error: f.Error, Attempts: f.Attempts,
		FirstReceived: f.FirstReceived, FailedAt: f.FailedAt, SourceQueue: f.SourceQueue, Host: f.Host,
		GroupID: m.GroupID, Replays: m.Replays, Unverified: m.Unverified,
	}
}

// listing is what /api/dlq/messages returns.
type listing struct {
	Queue    string     `json:"queue"`
	URL      string     `json:"url"`
	FIFO     bool       `json:"fifo"`
	Sources  []string   `json:"sources"`
	Notes    []string   `json:"notes,omitempty"`
	Filter   string     `json:"filter"`
	Messages []listItem `json:"messages"`
	Scanned  int        `json:"scanned"`
	// Max is the bound of messages read: the request's max, or
	// Config.ScanMax; MaxScanMax is the most a request may ask.
	Max        int `json:"max"`
	MaxScanMax int `json:"maxScanMax"`
	// Approximate is the queue's approximate count (visible and in
	// flight) when the listing started; -1 when it could not be read.
	Approximate int  `json:"approximate"`
	Truncated   bool `json:"truncated,omitempty"`
	// Notice, when Truncated, says how much was shown and how to see
	// more.
	Notice    string `json:"notice,omitempty"`
	Shortfall string `json:"shortfall,omitempty"`
	// Classes are the error classes of every message read, matching or
	// not, for the filter's choices.
	Classes []string `json:"classes"`
	Actions bool     `json:"actions"`
	// PurgeWarning is what the purge panel says before it asks for the
	// queue's name ([dlq.Queue.PurgeWarning]): the queue's counts and,
	// when several source queues share it, every one of them. Only with
	// Actions.
	PurgeWarning string `json:"purgeWarning,omitempty"`
}

func queryFilter(r *http.Request) filterParams {
	q := r.URL.Query()
	return filterParams{Classes: q["class"], Attrs: q["attr"], Since: q.Get("since"), Until: q.Get("until"), Text: q.Get("text")}
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f, err := queryFilter(r).filter(time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit, err := s.scanMax(r.URL.Query().Get("max"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	oq, err := s.open(ctx, r.URL.Query().Get("queue"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	release, err := s.hold(ctx, oq, "listing")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	q := oq.q
	classes := map[string]bool{}
	var oldest time.Time
	var purgeWarning string
	if s.cfg.AllowActions { // before the scan, whose receives its counts would show
		purgeWarning = q.PurgeWarning(ctx)
	}
	// Every message read counts for the classes and the oldest failure;
	// the filter picks those listed.
	res, err := q.Scan(ctx, dlq.ScanConfig{Max: limit, Visibility: s.cfg.Visibility})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := listing{
		Queue: q.Name, URL: q.URL, FIFO: q.FIFO, Sources: q.Sources, Notes: q.Notes, Filter: f.String(),
		Messages: []listItem{}, Scanned: res.Scanned, Max: limit, MaxScanMax: MaxScanMax, Approximate: res.Coverage.Approximate,
		Truncated: res.Truncated, Shortfall: res.Coverage.Shortfall(),
		Classes: []string{}, Actions: s.cfg.AllowActions, PurgeWarning: purgeWarning,
	}
	for _, m := range res.Messages {
		if m.HasFailure && !m.Redriven() { // a redriven message's class is of an earlier failure
			classes[m.Failure.ErrorClass] = true
			if at := m.Failure.FailedAt; !at.IsZero() && (oldest.IsZero() || at.Before(oldest)) {
				oldest = at
			}
		}
		if f.Match(m) {
			out.Messages = append(out.Messages, newListItem(m))
		}
	}
	for c := range classes {
		out.Classes = append(out.Classes, c)
	}
	slices.Sort(out.Classes)
	if out.Truncated {
		out.Notice = listNotice(q.Name, len(out.Messages), res.Scanned, res.Coverage.Approximate, limit)
	}
	if res.Coverage.Complete {
		s.mu.Lock()
		if k := s.queues[queueKey(q)]; k != nil {
			k.oldest = oldest
		}
		s.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, out)
}

// scanMax reads the max of a request: the bound of the messages read, from
// 1 to [MaxScanMax]; Config.ScanMax when v is empty.
func (s *Server) scanMax(v string) (int, error) {
	if strings.TrimSpace(v) == "" {
		return s.cfg.ScanMax, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > MaxScanMax {
		return 0, badRequest(fmt.Sprintf("max %q: want a whole number of messages from 1 to %d, the most one listing or dry run reads here; "+
			"for more, use `sqsworker dlq ls DLQ --max N` or `sqsworker dlq replay DLQ` with filters, which have no such bound", v, MaxScanMax))
	}
	return n, nil
}

// about is a queue's approximate count in words.
func about(approx int) string {
	if approx < 0 {
		return "an unknown number of messages (the queue's count could not be read)"
	}
	return fmt.Sprintf("about %d messages", approx)
}

// listNotice says that a listing stopped at its bound: what it shows of
// the queue, and how to see more.
func listNotice(queue string, shown, scanned, approx, limit int) string {
	head := fmt.Sprintf("Shown %d of %s in %s", shown, about(approx), queue)
	if shown != scanned {
		head = fmt.Sprintf("Shown %d matching the filter among the first %d read of %s in %s", shown, scanned, about(approx), queue)
	}
	more := fmt.Sprintf("read more at once (max, up to %d)", MaxScanMax)
	if limit >= MaxScanMax {
		more = "narrow the filter"
	}
	return fmt.Sprintf("%s: the listing stopped at its limit of %d messages read (SQS has no paging: each read receives the messages). "+
		"To see more, %s, or use `sqsworker dlq ls %s --max N` with filters.", head, limit, more, queue)
}

// planNotice says that a dry run stopped at its bound: only its messages
// would move.
func planNotice(queue string, planned, scanned, approx, limit int) string {
	more := fmt.Sprintf("a dry run with a higher limit (max, up to %d), ", MaxScanMax)
	if limit >= MaxScanMax {
		more = ""
	}
	return fmt.Sprintf("The dry run stopped at its limit of %d messages, after reading %d of %s in %s: confirming moves only these %d; "+
		"any other matching messages stay in the queue. For them: another dry run after this replay, %sor `sqsworker dlq replay %s` with the filters (no limit).",
		limit, scanned, about(approx), queue, planned, more, queue)
}

// replayNotice is what a replay of a dry run that stopped at its bound
// says it did.
func replayNotice(planned, limit, approx int) string {
	return fmt.Sprintf("Only the %d messages of the dry run were acted on: it stopped at its limit of %d, and the queue held %s; "+
		"any other matching messages stay in the queue (run a new dry run for them).", planned, limit, about(approx))
}

// messageDetail is one message with its body and attributes: only on
// explicit request.
type messageDetail struct {
	listItem
	Body              string            `json:"body"`
	Attributes        map[string]string `json:"attributes"`
	MessageAttributes map[string]string `json:"messageAttributes"`
}

func (s *Server) handleMessage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.URL.Query().Get("id")
	if id == "" {
		s.fail(w, r, badRequest("no message id given"))
		return
	}
	limit, err := s.scanMax(r.URL.Query().Get("max"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	oq, err := s.open(ctx, r.URL.Query().Get("queue"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	release, err := s.hold(ctx, oq, "lookup")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	res, err := oq.q.Scan(ctx, dlq.ScanConfig{Filter: dlq.Filter{IDs: []string{id}}, Max: limit, Visibility: s.cfg.Visibility,
		Until: func(*dlq.Message) bool { return true }})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(res.Messages) == 0 {
		s.fail(w, r, &httpError{http.StatusNotFound, fmt.Sprintf("message %s not found in %s (read %d messages)", id, oq.q.Name, res.Scanned)})
		return
	}
	m := res.Messages[0]
	d := messageDetail{listItem: newListItem(m), Body: m.Body, Attributes: m.Attributes, MessageAttributes: map[string]string{}}
	for k, v := range m.MessageAttributes {
		if strings.HasPrefix(v.DataType, "Binary") {
			d.MessageAttributes[k] = fmt.Sprintf("(%s, %d bytes)", v.DataType, len(v.BinaryValue))
			continue
		}
		d.MessageAttributes[k] = v.StringValue
	}
	writeJSON(w, http.StatusOK, d)
}

// plan is a dry run kept for the replay that confirms it.
type plan struct {
	queue  string
	filter dlq.Filter
	to     string
	// ids are the dead-letter IDs of the messages the dry run would move,
	// then of the duplicate copies of their jobs it would delete.
	ids     []string
	moves   int // how many of ids are to move
	created time.Time
	// notice says, when the dry run stopped at its limit, that only its
	// messages are acted on.
	notice string
}

const planTTL = 15 * time.Minute

// maxPlans is how many dry runs are kept for their confirmation at most:
// the newest. A plan holds up to MaxScanMax message IDs.
const maxPlans = 32

// planGone is the answer to a confirmation of a plan not kept.
var planGone = fmt.Sprintf("no such dry run, or it expired (a dry run is kept %s, and only the newest %d): run the dry run again",
	brief.Duration(planTTL), maxPlans)

// keepPlan keeps p for its confirmation and returns its ID, after
// forgetting the plans past planTTL and, beyond maxPlans, the oldest.
func (s *Server) keepPlan(p *plan) string {
	id := RandomToken()[:16]
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, old := range s.plans {
		if time.Since(old.created) > planTTL {
			delete(s.plans, k)
		}
	}
	for len(s.plans) >= maxPlans {
		oldest := ""
		for k, old := range s.plans {
			if oldest == "" || old.created.Before(s.plans[oldest].created) {
				oldest = k
			}
		}
		delete(s.plans, oldest)
	}
	s.plans[id] = p
	return id
}

type planRequest struct {
	Queue  string       `json:"queue"`
	Filter filterParams `json:"filter"`
	// IDs are messages chosen one by one; empty: every message the
	// filter selects.
	IDs []string `json:"ids"`
	To  string   `json:"to"`
	// Max bounds the messages planned. Default 0: Config.ScanMax; at most
	// MaxScanMax.
	Max int `json:"max"`
}

type planResponse struct {
	PlanID string            `json:"planId"`
	Result *dlq.ReplayResult `json:"result"`
	// Warnings are shown above the plan: a destination that is not a
	// source queue of the dead-letter queue.
	Warnings []string `json:"warnings,omitempty"`
	// Max is the bound of messages planned; MaxScanMax the most a request
	// may ask.
	Max        int `json:"max"`
	MaxScanMax int `json:"maxScanMax"`
	// Notice, when the dry run stopped at Max, says that only its
	// messages are acted on, and how to act on more.
	Notice string `json:"notice,omitempty"`
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("bad request body: " + err.Error())
	}
	return nil
}

func (s *Server) handlePlan(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req planRequest
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := req.Filter.filter(time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f.IDs = req.IDs
	if err := f.Validate(); err != nil {
		s.fail(w, r, badRequest(err.Error()))
		return
	}
	limit := s.cfg.ScanMax
	if req.Max != 0 {
		if limit, err = s.scanMax(strconv.Itoa(req.Max)); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	oq, err := s.open(ctx, req.Queue)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// A plan is as bounded as a listing: the page shows it whole, and its
	// replay matches each message against every ID of it.
	cfg := dlq.ReplayConfig{Filter: f, Visibility: s.cfg.Visibility, Limit: limit}
	var warnings []string
	if req.To != "" {
		t, err := oq.q.Target(ctx, req.To)
		if err != nil {
			s.fail(w, r, badRequest("destination: "+err.Error()))
			return
		}
		cfg.To = t.URL
		warn, err := oq.q.ForeignDestination(ctx, t)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if warn != "" {
			warnings = append(warnings, warn+". Check the destination before you confirm.")
		}
	}
	release, err := s.hold(ctx, oq, "dry run")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := oq.q.Plan(ctx, cfg)
	release()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p := &plan{queue: req.Queue, filter: f, to: cfg.To, created: time.Now()}
	for _, m := range res.Messages {
		p.ids = append(p.ids, m.MessageID)
	}
	p.moves = len(p.ids)
	// The copies of their jobs that the dry run would delete: the replay
	// deletes them too (or moves one, should it read it before the copy
	// planned; one copy per job all the same), rather than leave them to
	// be replayed again.
	for _, d := range res.Dropped {
		p.ids = append(p.ids, d.MessageID)
	}
	out := planResponse{Result: res, Warnings: warnings, Max: limit, MaxScanMax: MaxScanMax}
	if res.LimitHit {
		out.Notice = planNotice(oq.q.Name, len(res.Messages), res.Scanned, res.Coverage.Approximate, limit)
		p.notice = replayNotice(len(res.Messages), limit, res.Coverage.Approximate)
	}
	out.PlanID = s.keepPlan(p)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleReplay(w http.ResponseWriter, r *http.Request) {
	var req struct {
		PlanID string `json:"planId"`
	}
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	s.mu.Lock()
	p := s.plans[req.PlanID]
	delete(s.plans, req.PlanID) // a plan is confirmed once
	s.mu.Unlock()
	if p == nil || time.Since(p.created) > planTTL {
		s.fail(w, r, badRequest(planGone))
		return
	}
	if p.moves == 0 {
		s.fail(w, r, badRequest("the dry run moves nothing"))
		return
	}
	oq, err := s.open(r.Context(), p.queue)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	release, err := s.hold(r.Context(), oq, "replay")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Exactly the messages the dry run showed, by their dead-letter IDs,
	// that still pass its filter.
	f := p.filter
	f.IDs = p.ids
	audit := s.auditFor(r)
	j := &job{Queue: oq.q.Name, Total: p.moves, Notice: p.notice}
	// Under mu, which Serve holds to cancel base: a replay starts before
	// Serve waits for the replays, or not at all.
	s.mu.Lock()
	if s.base.Err() != nil {
		s.mu.Unlock()
		release()
		s.fail(w, r, &httpError{http.StatusServiceUnavailable, "not replayed: the server is shutting down"})
		return
	}
	j.ID, j.Started = s.jobs.newID(), s.now()
	s.jobs.add(j, j.Started)
	s.jobsWG.Add(1)
	s.mu.Unlock()
	// The filter is not logged: its text condition may quote a body.
	s.log.Info("replay started", "queue", oq.q.Name, "messages", p.moves, "job", j.ID)
	go func() {
		defer s.jobsWG.Done()
		res, err := oq.q.Replay(s.base, dlq.ReplayConfig{
			Filter: f, To: p.to, Limit: len(p.ids), Visibility: s.cfg.Visibility, Audit: audit,
			Progress: func(pr dlq.Progress) { j.mu.Lock(); j.Progress = pr; j.mu.Unlock() },
		})
		// The queue is free before the job says it is done: a listing or a
		// dry run asked then is not refused for a replay under way.
		release()
		j.mu.Lock()
		j.Done, j.Result, j.Finished = true, res, s.now()
		if err != nil {
			j.Error = err.Error()
		}
		j.mu.Unlock()
		moved := 0
		if res != nil {
			moved = res.Moved
		}
		s.log.Info("replay ended", "queue", oq.q.Name, "moved", moved, "job", j.ID, "err", err)
	}()
	started := map[string]string{"jobId": j.ID}
	if p.notice != "" {
		started["notice"] = p.notice
	}
	writeJSON(w, http.StatusAccepted, started)
}

// auditFor is the audit of an action asked by r: the server's, noting
// that it came through the web UI and from where.
func (s *Server) auditFor(r *http.Request) dlq.Audit {
	a := s.cfg.Audit
	note := "through sqsworker ui, client " + r.RemoteAddr
	if a.CallerNote != "" {
		note = a.CallerNote + "; " + note
	}
	a.CallerNote = note
	return a
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	j := s.jobs.get(id, s.now())
	s.mu.Unlock()
	if j == nil {
		if s.jobs.made(id) { // jobs under way are kept: it finished
			s.fail(w, r, &httpError{http.StatusGone, s.jobs.goneMessage(id, s.cfg.AuditFile)})
			return
		}
		s.fail(w, r, &httpError{http.StatusNotFound, "no such replay in this server (a server forgets its replays when it stops; the audit log holds their records)"})
		return
	}
	j.mu.Lock()
	b, err := json.Marshal(j)
	j.mu.Unlock()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (s *Server) handlePurge(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var req struct {
		Queue   string `json:"queue"`
		Confirm string `json:"confirm"`
	}
	if err := decode(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	oq, err := s.open(ctx, req.Queue)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Confirm != oq.q.Name {
		s.fail(w, r, badRequest(fmt.Sprintf("not purged: type the queue name %q to confirm", oq.q.Name)))
		return
	}
	release, err := s.hold(ctx, oq, "purge")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer release()
	if err := oq.q.Purge(ctx, dlq.PurgeConfig{Audit: s.auditFor(r)}); err != nil {
		if errors.Is(err, dlq.ErrPurgeInProgress) {
			err = &httpError{http.StatusConflict, "not purged: " + err.Error()}
		}
		s.fail(w, r, err)
		return
	}
	s.mu.Lock()
	if k := s.queues[queueKey(oq.q)]; k != nil {
		k.oldest = time.Time{}
	}
	s.mu.Unlock()
	s.log.Info("purged", "queue", oq.q.Name)
	writeJSON(w, http.StatusOK, map[string]any{"queue": oq.q.Name, "purged": true})
}

// maxAuditShown is the number of audit records the page shows: the last.
const maxAuditShown = 500

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	out := struct {
		File    string            `json:"file"`
		Records []dlq.AuditRecord `json:"records"`
		Skipped int               `json:"skipped,omitempty"`
	}{Records: []dlq.AuditRecord{}}
	if s.cfg.AuditFile != "" {
		out.File = filepath.Base(s.cfg.AuditFile)
		recs, skipped, err := readAudit(s.cfg.AuditFile, maxAuditShown)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Records, out.Skipped = recs, skipped
	}
	writeJSON(w, http.StatusOK, out)
}

// readAudit returns the last n records of an audit log file, newest first,
// and the number of lines that were not records. A replay-start or
// redrive-start record followed by the record of its outcome is left out:
// only one whose replay or redrive was stopped half-way (a crash) is
// shown.
func readAudit(path string, n int) ([]dlq.AuditRecord, int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return []dlq.AuditRecord{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading the audit log: %w", err)
	}
	defer f.Close()
	var recs []dlq.AuditRecord
	skipped := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec dlq.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			skipped++
			continue
		}
		switch rec.Action {
		case dlq.ActionReplay, dlq.ActionReplayFailed, dlq.ActionDropDuplicate, dlq.ActionRedrive, dlq.ActionRedriveFailed:
			recs = dropStart(recs, rec)
		}
		recs = append(recs, rec)
		if len(recs) > 2*n {
			recs = append(recs[:0], recs[len(recs)-n:]...)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, fmt.Errorf("reading the audit log: %w", err)
	}
	if len(recs) > n {
		recs = recs[len(recs)-n:]
	}
	slices.Reverse(recs)
	if recs == nil {
		recs = []dlq.AuditRecord{}
	}
	return recs, skipped, nil
}

// dropStart removes from recs the start record of what rec (a replay,
// dropped duplicate, redrive, or failed one) is about: the last replay-start with its queue
// and message ID, or redrive-start with its queue.
func dropStart(recs []dlq.AuditRecord, rec dlq.AuditRecord) []dlq.AuditRecord {
	start := dlq.ActionReplayStart
	if rec.Action == dlq.ActionRedrive || rec.Action == dlq.ActionRedriveFailed {
		start = dlq.ActionRedriveStart
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if r := recs[i]; r.Action == start && r.DLQ == rec.DLQ && r.DLQMessageID == rec.DLQMessageID {
			return slices.Delete(recs, i, i+1)
		}
	}
	return recs
}

// httpError is an error with the status it is answered with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(msg string) error { return &httpError{http.StatusBadRequest, msg} }

// fail answers with err: its own status, 404 for a missing queue, 502 for
// the rest (SQS's errors).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		writeError(w, he.status, he.msg)
	case dlq.IsQueueMissing(err):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		s.log.Warn("request failed", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusBadGateway, err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}
