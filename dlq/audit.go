package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"
)

// Actions recorded in [AuditRecord.Action].
const (
	ActionReplayStart   = "replay-start"   // one message about to be copied, or deleted as a duplicate, by a replay (see below)
	ActionReplay        = "replay"         // one message moved by a replay
	ActionDropDuplicate = "drop-duplicate" // a copy of a job the replay moved, deleted
	ActionReplayFailed  = "replay-failed"  // one message whose copy a replay could not send, or a duplicate it could not delete (see Note)
	ActionRedriveStart  = "redrive-start"  // an SQS message move task about to be started
	ActionRedrive       = "redrive"        // an SQS message move task started
	ActionRedriveFailed = "redrive-failed" // an SQS message move task not started, or whose reply was lost (see Note)
	ActionRedriveCancel = "redrive-cancel" // an SQS message move task cancelled
	ActionPurge         = "purge"          // a purge requested (recorded before it is sent)
	ActionPurgeFailed   = "purge-failed"   // a purge that SQS refused, or that failed unanswered (its Note says SQS may have applied it)
)

// A replay records each message twice: [ActionReplayStart] before it sends
// the copy, then [ActionReplay] once the copy is sent and the original
// deleted (or not: [AuditRecord.Deleted]), or [ActionReplayFailed] when
// the copy could not be sent. A duplicate copy of a job the replay moved
// is recorded twice as well: [ActionReplayStart] (its Note says it is to be
// deleted) before it is deleted, then [ActionDropDuplicate], or
// [ActionReplayFailed] when the delete failed. A replay-start without any
// of these (same DLQ and DLQMessageID) is a message whose replay was
// stopped between the two (a crash, kill -9): its copy may have been sent,
// and its original may still be in the dead-letter queue, to be replayed
// again under the same idempotency key; or, a duplicate, it may have been
// deleted.

// UnknownCaller is the caller recorded when none was given (see
// [Audit.Caller]).
const UnknownCaller = "unknown"

// Audit is where an operation that changes a queue records what it did,
// and who asked.
type Audit struct {
	// Record is called with each record: for a replay, before each message
	// is copied and after it is moved; for a redrive, before and after the
	// task is started; for a purge, before it is sent. An error ends the operation
	// (a replay stops before the next message; a purge is not sent).
	// Default nil: nothing is recorded. [AuditLog.Record] is one.
	Record func(context.Context, AuditRecord) error
	// Caller is who runs the operation, such as the ARN that
	// sts:GetCallerIdentity returns. Default [UnknownCaller].
	Caller string
	// CallerNote says why the caller is unknown or approximate, when it is.
	CallerNote string
}

func (a Audit) record(ctx context.Context, rec AuditRecord) error {
	if a.Record == nil {
		return nil
	}
	rec.Time = time.Now().UTC()
	rec.Caller, rec.CallerNote = a.Caller, a.CallerNote
	if rec.Caller == "" {
		rec.Caller = UnknownCaller
	}
	return a.Record(ctx, rec)
}

// AuditRecord is one entry of an audit log. Fields that do not apply to the
// action are empty.
type AuditRecord struct {
	// Time is when the record was made, in UTC.
	Time time.Time `json:"time"`
	// Action is one of the Action constants.
	Action string `json:"action"`
	// Caller and CallerNote are [Audit.Caller] and [Audit.CallerNote].
	Caller     string `json:"caller"`
	CallerNote string `json:"callerNote,omitempty"`
	// DLQ is the dead-letter queue's URL.
	DLQ string `json:"dlq"`
	// Destination is the URL of the queue a message was sent to, or the ARN
	// a move task moves to ("" for the source queues).
	Destination string `json:"destination,omitempty"`
	// OriginalMessageID, DLQMessageID and NewMessageID identify a replayed
	// message: in the queue it failed in, in the dead-letter queue, and its
	// copy.
	OriginalMessageID string `json:"originalMessageId,omitempty"`
	DLQMessageID      string `json:"dlqMessageId,omitempty"`
	NewMessageID      string `json:"newMessageId,omitempty"`
	// Replays is the copy's replay count (0: the copy had no room for it).
	Replays int `json:"replays,omitempty"`
	// Filter describes the replay's filter.
	Filter string `json:"filter,omitempty"`
	// Deleted is true when the original was deleted from the dead-letter
	// queue after its copy was sent.
	Deleted bool `json:"deleted,omitempty"`
	// ApproximateMessages is the dead-letter queue's approximate number of
	// messages, for a purge or a redrive.
	ApproximateMessages int `json:"approximateMessages,omitempty"`
	// TaskHandle is the handle of a message move task.
	TaskHandle string `json:"taskHandle,omitempty"`
	// PerSecond is a move task's rate (0: SQS's choice).
	PerSecond int `json:"perSecond,omitempty"`
	// Note says what else happened.
	Note string `json:"note,omitempty"`
}

// AuditLog writes audit records as JSON lines. Create one with
// [OpenAuditLog] (a file) or [NewAuditLog] (any writer). It is safe for
// concurrent use.
type AuditLog struct {
	mu sync.Mutex
	w  io.Writer
	f  *os.File // nil when the log does not own a file
}

// NewAuditLog returns an AuditLog that writes to w, such as standard error.
// Close does not close w.
func NewAuditLog(w io.Writer) *AuditLog { return &AuditLog{w: w} }

// OpenAuditLog opens the audit log file at path for appending, creating it
// with mode 0600 (readable and writable by its owner only). It never
// follows a symbolic link at path (a link planted there could point the
// records at another file): path must be a regular file or not exist. An
// existing file that others may write to is refused, as its records could
// be rewritten.
func OpenAuditLog(path string) (*AuditLog, error) {
	if fi, err := os.Lstat(path); err == nil {
		if err := checkAuditFile(path, fi); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("dlq: audit log %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		if isSymlinkErr(err) {
			return nil, fmt.Errorf("dlq: audit log %s is a symbolic link: not followed, give the file itself: %w", path, err)
		}
		return nil, fmt.Errorf("dlq: opening the audit log: %w", err)
	}
	// Check again what was opened: path may have changed since Lstat.
	fi, err := f.Stat()
	if err == nil {
		err = checkAuditFile(path, fi)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &AuditLog{w: f, f: f}, nil
}

func checkAuditFile(path string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("dlq: audit log %s is a symbolic link: not followed, give the file itself", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("dlq: audit log %s is not a regular file (%s)", path, fi.Mode().Type())
	case fi.Mode().Perm()&0o002 != 0:
		return fmt.Errorf("dlq: audit log %s can be written by anyone (mode %04o): its records could be rewritten; chmod o-w it, or give another file", path, fi.Mode().Perm())
	}
	return nil
}

// Record appends rec as one JSON line, and syncs a file to disk.
func (l *AuditLog) Record(_ context.Context, rec AuditRecord) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return fmt.Errorf("dlq: encoding an audit record: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("dlq: writing the audit log: %w", err)
	}
	if l.f != nil {
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("dlq: writing the audit log: %w", err)
		}
	}
	return nil
}

// Close closes the file OpenAuditLog opened; it does nothing for a log of
// NewAuditLog.
func (l *AuditLog) Close() error {
	if l.f == nil {
		return nil
	}
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("dlq: closing the audit log: %w", err)
	}
	return nil
}
