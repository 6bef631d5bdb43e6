package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqsworker/sqsworker/cmd/sqsworker/internal/brief"
	"github.com/sqsworker/sqsworker/dlq"
)

// job is a replay under way or done, as GET /api/jobs/{id} shows it.
type job struct {
	mu       sync.Mutex
	ID       string            `json:"id"`
	Queue    string            `json:"queue"`
	Total    int               `json:"total"`
	Progress dlq.Progress      `json:"progress"`
	Done     bool              `json:"done"`
	Result   *dlq.ReplayResult `json:"result,omitempty"`
	Error    string            `json:"error,omitempty"`
	// Notice says, when the dry run confirmed stopped at its limit, that
	// only its messages are acted on.
	Notice   string    `json:"notice,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
}

// jobs are the replays of a server: every one under way, and the newest
// finished ones, for their status page. A finished replay is forgotten
// after a retention time, or sooner when more than a cap of them have
// finished since (see [Config.JobRetention], [Config.MaxFinishedJobs]);
// the audit log is the durable record of what it moved.
//
// A job's ID is its number in this server and a MAC of that number under
// a key made at start: a missing job whose ID this server made has
// finished and been forgotten (jobs under way are always kept), without a
// list of the forgotten ones to keep.
type jobs struct {
	retention time.Duration
	max       int
	key       []byte

	// Under Server.mu.
	seq  uint64
	byID map[string]*job
}

func newJobs(retention time.Duration, maxFinished int) *jobs {
	return &jobs{retention: retention, max: maxFinished, key: []byte(RandomToken()), byID: map[string]*job{}}
}

// newID returns the ID of the next job. Under Server.mu.
func (js *jobs) newID() string {
	js.seq++
	n := strconv.FormatUint(js.seq, 10)
	return n + "-" + js.mac(n)
}

func (js *jobs) mac(n string) string {
	m := hmac.New(sha256.New, js.key)
	m.Write([]byte(n))
	return hex.EncodeToString(m.Sum(nil))[:16]
}

// made reports whether this server made the job ID id.
func (js *jobs) made(id string) bool {
	n, mac, ok := strings.Cut(id, "-")
	if !ok {
		return false
	}
	if _, err := strconv.ParseUint(n, 10, 64); err != nil {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(js.mac(n)))
}

// add keeps j, after forgetting the finished jobs past their time or
// beyond the cap. Under Server.mu.
func (js *jobs) add(j *job, now time.Time) {
	js.prune(now)
	js.byID[j.ID] = j
}

// get returns the job id, after forgetting the finished jobs past their
// time or beyond the cap; nil when it is not kept. Under Server.mu.
func (js *jobs) get(id string, now time.Time) *job {
	js.prune(now)
	return js.byID[id]
}

// prune forgets the finished jobs that finished more than the retention
// time before now, and then the oldest finished ones beyond the cap. Jobs
// under way are kept. Under Server.mu.
func (js *jobs) prune(now time.Time) {
	type done struct {
		id string
		at time.Time
	}
	var finished []done
	for id, j := range js.byID {
		j.mu.Lock()
		ended, at := j.Done, j.Finished
		j.mu.Unlock()
		if !ended {
			continue
		}
		if now.Sub(at) > js.retention {
			delete(js.byID, id)
			continue
		}
		finished = append(finished, done{id, at})
	}
	if len(finished) <= js.max {
		return
	}
	slices.SortFunc(finished, func(a, b done) int { return b.at.Compare(a.at) }) // newest first
	for _, d := range finished[js.max:] {
		delete(js.byID, d.id)
	}
}

// goneMessage is the answer for a job this server made and forgot.
func (js *jobs) goneMessage(id, auditFile string) string {
	where := "the audit log holds the record of every message it moved"
	if auditFile != "" {
		where += " (the Audit log page shows it)"
	}
	return fmt.Sprintf("replay %s finished and was pruned: this server keeps a finished replay's status for %s, and only the newest %d; %s",
		id, brief.Duration(js.retention), js.max, where)
}
