package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/schedule"
)

func init() {
	commands = append(commands, newSendCmd)
}

// Bounds of the lines send reads from stdin.
const (
	// sendMaxLine is the longest line read: a 1 MiB body, escaped in JSON,
	// with attributes. Longer lines are reported, not read into memory.
	sendMaxLine = 8 << 20
	// sendBatch is the most messages of one SendMessageBatch call. Lines
	// are sent a call at a time, as they are read, so that an interrupt
	// lets the call under way finish and knows which lines were sent.
	sendBatch = 10
	// sendMaxDetails is the most failures named in the error message; the
	// output names them all.
	sendMaxDetails = 10
	// sendReaderWait is how long an interrupted send waits for its reader
	// of stdin to stop; see sendLines.
	sendReaderWait = 100 * time.Millisecond
)

type sendFlags struct {
	attrs          []string
	delay          time.Duration
	group          string
	dedupID        string
	idempotencyKey string
	raw            bool
	schedule       string
	scheduledTime  string
	// force sends to a queue that is another's dead-letter queue.
	force bool
}

func newSendCmd(a *app) *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send QUEUE [BODY...]",
		Short: "Send messages: BODY arguments, or lines from stdin (JSON, or each line as it is with --raw)",
		Long: `Send messages to a queue, given by name, URL or ARN.

Each BODY argument is one message. Without BODY arguments, send reads lines
from stdin, one message per line (blank lines are skipped). With --raw, each
line is the body of its message, as it is (a JSON object too). Otherwise each
line is a JSON object that describes its message:

  {"body": "...", "idempotencyKey": "...", "delaySeconds": 10,
   "groupId": "...", "deduplicationId": "...",
   "attributes": {"tenant": "acme",
                  "priority": {"dataType": "Number", "stringValue": "3"},
                  "blob": {"dataType": "Binary", "binaryValue": "AAEC"}}}

"body" is required. An attribute given as a string is a String attribute, as
a JSON number a Number attribute; binaryValue is base64. The flags apply to
BODY arguments and --raw lines, and are the defaults of the JSON lines that
do not set the field (a line's attributes are added to the --attr ones, and
win on the same name).

The idempotency key is sent as the "idempotency-key" attribute, which the
idempotency middleware reads. A message of a standard queue without one gets
a generated key ("auto:" and 26 random characters) when it has room for it
(up to nine attributes with it, and within the queue's size), so that a call SQS stored but whose answer was lost, which the SDK
sends again, runs its jobs once under that middleware; sending a file again
makes new keys, so give each line an idempotencyKey to cover a second run. FIFO queues (names ending in .fifo) need a
message group (--group or "groupId"), and a deduplication ID unless the queue
has content-based deduplication; they take no per-message delay.
A queue that is another queue's dead-letter queue is refused: a job sent there
would never run (--force sends to it anyway).
--dedup-id and --idempotency-key name one message: of lines on stdin, only
the first may take them (the others fail, saying so); give each line its own
"deduplicationId" or "idempotencyKey".

Messages are checked before anything is sent: a message SQS would refuse
(empty or over 1 MiB, more than 10 attributes, a bad attribute name or value,
a delay over 365 days, ...) or a line that is not valid JSON is reported with its
line number and not sent; the other messages are. On a FIFO queue, a line
not sent (refused, failed, or maybe sent) holds back its group's later lines,
and a line whose group cannot be read holds back every later line: sending
again from the first line not sent keeps each group's order. Messages are sent as they
are read, with SendMessageBatch, ten (and at most 1 MiB) per call; the entries
SQS fails on its side are retried. A failure whose request got no answer (the
network, a timeout, an SQS 5xx), or whose entry SQS failed on its side, is
reported as "may have been sent".

Ctrl-C lets the call under way finish, then stops and says which line was the
last one handled, and how to send the rest:

  sqsworker: interrupted after line 5400; resume with ` + "`tail -n +5401`" + `

A second Ctrl-C cuts the call under way short; its lines may have been sent.

--schedule NAME sends one occurrence of a schedule as the sqsinfra Schedule
construct's EventBridge Scheduler schedule does: the body is the envelope
{"sqsworker.schedule":{"name":NAME,"scheduledTime":T},"payload":BODY} with T
from --scheduled-time (RFC 3339, any offset, written in UTC; default: now, to
the minute) and the JSON BODY argument as the payload (none: null). Its idempotency key, from
schedule.Key, is "schedule:NAME@T": the same occurrence sent twice runs once
under the idempotency middleware. A loop of such sends is the local
equivalent of a schedule.

Output: "sent N" at the end, and a progress line while sending when stderr
is a terminal (--quiet for neither). With -o table, a row per message (INDEX
is the BODY argument's position or the line number); with -o json, a list of
{"index", "messageId", "error", "maybeSent"}. The exit status is 1 when any
message was not sent, 2 for a mistake in the command line, 130 after Ctrl-C.`,
		Example: `  # One message, with an attribute and an idempotency key
  sqsworker send orders '{"order":42}' --attr tenant=acme --idempotency-key order-42

  # Several messages, delayed by 30 seconds
  sqsworker send orders '{"order":43}' '{"order":44}' --delay 30s

  # A FIFO queue
  sqsworker send orders.fifo '{"order":45}' --group customer-7 --dedup-id order-45

  # Each line of a file is a body, as it is
  sqsworker send orders --raw < bodies.txt

  # JSON lines from a file; --attr is added to every line's attributes
  sqsworker send orders --attr source=backfill < jobs.jsonl

  # An interrupted send, resumed
  tail -n +5401 jobs.jsonl | sqsworker send orders

  # An occurrence of the schedule "nightly-report", as EventBridge Scheduler sends it
  sqsworker send jobs '{"report":"sales"}' --schedule nightly-report --scheduled-time 2026-12-01T03:00:00Z

  # A local stand-in for a rate(1 minute) schedule
  while sleep 60; do sqsworker send jobs --schedule sync --quiet; done

  # From jq, printing the message IDs as JSON
  jq -c '.[] | {body: tojson, idempotencyKey: (.id | tostring)}' orders.json | sqsworker send orders -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("send takes a QUEUE and optional BODY arguments; see --help")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.send(cmd.Context(), f, args[0], args[1:])
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.attrs, "attr", nil, "a String message attribute `name=value` (repeatable)")
	fl.DurationVar(&f.delay, "delay", 0, "postpone the job by this long, up to 365 days (standard queues); over 15m the runtimes hold it back until then")
	fl.StringVar(&f.group, "group", "", "message group ID (FIFO queues: required)")
	fl.StringVar(&f.dedupID, "dedup-id", "", "message deduplication ID (FIFO queues)")
	fl.StringVar(&f.idempotencyKey, "idempotency-key", "", `idempotency key, sent as the "idempotency-key" attribute`)
	fl.BoolVar(&f.raw, "raw", false, "each line of stdin is a message body, as it is (not a JSON description)")
	fl.BoolVar(&f.force, "force", false, "send to a queue that is another queue's dead-letter queue (refused otherwise: its jobs would never run)")
	fl.StringVar(&f.schedule, "schedule", "", "send one occurrence of the schedule `NAME`: the BODY (JSON, optional) in its envelope")
	fl.StringVar(&f.scheduledTime, "scheduled-time", "", "the occurrence's scheduled `time`, RFC 3339 (with --schedule; default: now, to the minute)")
	return cmd
}

// sendResult is the outcome of one message, as printed.
type sendResult struct {
	Index     int    `json:"index"`
	MessageID string `json:"messageId,omitempty"`
	Error     string `json:"error,omitempty"`
	// MaybeSent is true when the request that carried the message got no
	// answer: SQS may have it.
	MaybeSent bool `json:"maybeSent,omitempty"`
	// IdempotencyKey is the key generated for a message that may have been
	// sent: sent again with it, the two copies are one job.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`

	// hint is a hint for the error's kind, given once in the summary.
	hint string
}

// sendQueue is what send needs to know of the queue.
type sendQueue struct {
	url          string
	fifo         bool
	contentDedup bool
}

// rawHint is the hint given when lines are not the JSON send expects.
const rawHint = `each line is a JSON object such as {"body": "..."}; to send each line as it is (a JSON object too), use --raw`

func (a *app) send(ctx context.Context, f sendFlags, queueArg string, bodies []string) error {
	base, err := f.message()
	if err != nil {
		return err
	}
	if f.schedule != "" || f.scheduledTime != "" {
		if bodies, err = f.scheduleBodies(bodies, time.Now()); err != nil {
			return err
		}
	}
	switch {
	case len(bodies) > 0 && f.raw:
		return usageError{errors.New("--raw is for lines on stdin; BODY arguments are sent as they are")}
	case len(bodies) > 1 && f.dedupID != "":
		return usageError{fmt.Errorf("--dedup-id with %d BODY arguments: a FIFO queue would keep only the first; send them as JSON lines with a deduplicationId each", len(bodies))}
	case len(bodies) > 1 && f.idempotencyKey != "":
		return usageError{fmt.Errorf("--idempotency-key with %d BODY arguments: the idempotency middleware would run only the first; send them as JSON lines with an idempotencyKey each", len(bodies))}
	case f.raw && f.dedupID != "":
		return usageError{errors.New("--dedup-id with --raw: a FIFO queue would keep only the first line; use JSON lines with a deduplicationId each, or a queue with content-based deduplication")}
	case f.raw && f.idempotencyKey != "":
		return usageError{errors.New("--idempotency-key with --raw: the idempotency middleware would run only the first line; use JSON lines with an idempotencyKey each")}
	}
	q, err := a.sendQueue(ctx, queueArg)
	if err != nil {
		return err
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	if !f.force {
		switch sources, err := deadLetterSources(ctx, c, q.url); {
		case err != nil:
			fmt.Fprintf(a.err, "warning: could not check that %s is no dead-letter queue (%v); sending anyway\n", queueName(q.url), err)
		case sources != "":
			name := queueName(q.url)
			return fmt.Errorf("%s is the dead-letter queue of %s: a job sent there is never run, only listed by sqsworker dlq; send it to %s, or pass --force to send to %s anyway",
				name, sources, sources, name)
		}
	}
	p, err := producer.New(c, producer.Config{QueueURL: q.url})
	if err != nil {
		return err
	}
	// The calls under way finish after the first interrupt; the second
	// cuts them short.
	sendCtx, stop := untilStopNow(ctx)
	defer stop()
	s := &sender{a: a, p: p, ctx: ctx, sendCtx: sendCtx, prog: a.progress("sent", "messages"), fifo: q.fifo}
	if len(bodies) > 0 {
		if err := q.checkFlags(f, queueArg); err != nil {
			return err
		}
		s.what = "message"
		s.prog.SetTotal(int64(len(bodies)))
		s.sendArgs(base, bodies)
	} else {
		if f.raw {
			if err := q.checkFlags(f, queueArg); err != nil {
				return err
			}
		}
		s.what = "line"
		if isTTY(a.in) && !a.quiet {
			kind := "JSON lines"
			if f.raw {
				kind = "lines"
			}
			fmt.Fprintf(a.errs, "sqsworker send: reading %s from stdin (end with Ctrl-D; see --help)\n", kind)
		}
		if err := s.sendLines(base, q, f.raw); err != nil {
			// Say what was sent before the input failed.
			s.prog.Finish()
			_ = s.print()
			return err
		}
		if len(s.results) == 0 && !s.interrupted && !a.quiet {
			fmt.Fprintln(a.errs, "sqsworker send: no messages on stdin")
		}
	}
	s.prog.Finish()
	if err := s.print(); err != nil {
		return err
	}
	return s.outcome()
}

// sender sends messages a SendMessageBatch call at a time and keeps the
// outcome of each, in input order.
type sender struct {
	a *app
	p *producer.Producer
	// ctx is the command's: the first interrupt cancels it, and no call
	// starts after it. sendCtx is the calls': the second interrupt
	// cancels it.
	ctx, sendCtx context.Context
	prog         *progress
	what         string // "line" or "message"

	results []sendResult
	pending []producer.Message
	slots   []int // index in results of each of pending
	size    int   // of pending, in bytes

	// fifo is true for a FIFO queue: once a line of a group is not sent,
	// the group's later lines are not sent either, so that the group's
	// order holds when the line is sent again (see hold). failedGroups
	// holds the first such line of each group; failedUnknown the first
	// line not sent whose group is not known (a line that is not JSON),
	// which holds back every later line.
	fifo          bool
	failedGroups  map[string]int
	failedUnknown int
	// dedupLine and keyLine are the first lines that took the
	// deduplication ID of --dedup-id and the key of --idempotency-key.
	dedupLine, keyLine int

	// interrupted is set when the first interrupt stopped the input;
	// after is the last line (or argument) handled then, and of is the
	// number of BODY arguments.
	interrupted bool
	after, of   int
}

// sharedByFlag returns an error for line n, m, when it has the
// deduplication ID or idempotency key of --dedup-id or --idempotency-key
// (base's) and an earlier line had it too: a FIFO queue would keep only
// the first, the idempotency middleware run only the first, and the others
// be lost. The first line that has it may go.
func (s *sender) sharedByFlag(m producer.Message, base producer.Message, n int) error {
	if base.DeduplicationID != "" && m.DeduplicationID == base.DeduplicationID {
		if s.dedupLine != 0 {
			return fmt.Errorf(`--dedup-id gives it the deduplication ID of line %d: a FIFO queue would keep only the first; set "deduplicationId" on each line, or leave --dedup-id out`, s.dedupLine)
		}
		s.dedupLine = n
	}
	if base.IdempotencyKey != "" && m.IdempotencyKey == base.IdempotencyKey {
		if s.keyLine != 0 {
			return fmt.Errorf(`--idempotency-key gives it the key of line %d: the idempotency middleware would run only the first; set "idempotencyKey" on each line, or leave --idempotency-key out`, s.keyLine)
		}
		s.keyLine = n
	}
	return nil
}

// failed records, for a FIFO queue, that results[slot], a message of group
// (unknown: "" and known false), was not sent.
func (s *sender) failed(slot int, group string, known bool) {
	if !s.fifo {
		return
	}
	line := s.results[slot].Index
	switch {
	case !known:
		if s.failedUnknown == 0 || line < s.failedUnknown {
			s.failedUnknown = line
		}
	case s.failedGroups[group] == 0 || line < s.failedGroups[group]:
		if s.failedGroups == nil {
			s.failedGroups = map[string]int{}
		}
		s.failedGroups[group] = line
	}
}

// firstHeld returns, for a FIFO queue, the first line not sent that holds
// back later lines of its group (or of any, its group not known), 0 when
// none does.
func (s *sender) firstHeld() int {
	first := s.failedUnknown
	for _, line := range s.failedGroups {
		if first == 0 || line < first {
			first = line
		}
	}
	return first
}

// hold returns, for a FIFO queue, why m is not sent: an earlier line of its
// group, or one whose group is not known, was not sent. "" when m may go.
func (s *sender) hold(m producer.Message) string {
	if !s.fifo {
		return ""
	}
	if line := s.failedGroups[m.GroupID]; line != 0 && (s.failedUnknown == 0 || line < s.failedUnknown) {
		return fmt.Sprintf("not sent: %s %d of its group %q was not sent before it; send again from %s %d, to keep the group's order", s.what, line, m.GroupID, s.what, line)
	}
	if line := s.failedUnknown; line != 0 {
		return fmt.Sprintf("not sent: %s %d, whose group is not known, was not sent before it; send again from %s %d, to keep its group's order", s.what, line, s.what, line)
	}
	return ""
}

// add queues m, the message of results[slot], sending the call before when
// m does not fit in it; on a FIFO queue, m is not sent when hold says so.
func (s *sender) add(m producer.Message, slot int) {
	n := producer.Size(m)
	if len(s.pending) > 0 && s.size+n > producer.MaxMessageSize {
		s.flush() // before hold: a line of m's group may fail in it
	}
	if why := s.hold(m); why != "" {
		s.results[slot].Error = why
		s.failed(slot, m.GroupID, true)
		return
	}
	s.pending = append(s.pending, m)
	s.slots = append(s.slots, slot)
	s.size += n
	if len(s.pending) == sendBatch {
		s.flush()
	}
}

// flush sends the pending messages in one call, which the first interrupt
// does not cut short.
func (s *sender) flush() {
	if len(s.pending) == 0 {
		return
	}
	res, _ := s.p.SendBatch(s.sendCtx, s.pending)
	for i, r := range res {
		out := &s.results[s.slots[i]]
		out.MessageID = r.MessageID
		out.Error = sendErrorText(r.Err)
		if r.Err != nil {
			s.failed(s.slots[i], s.pending[i].GroupID, true)
		}
		if r.Err != nil && outcomeUnknown(r.Err) {
			out.MaybeSent = true
			out.Error = "may have been sent: " + out.Error
			if s.sendCtx.Err() != nil {
				out.Error = "may have been sent: the second interrupt cut its request short"
			}
			if r.GeneratedKey != "" {
				// Sent again without it, it would get a new key: a second
				// job, should SQS have the first.
				out.IdempotencyKey = r.GeneratedKey
				out.Error += fmt.Sprintf(`; it went with the generated idempotency key %s: to send it again as the same job, give it "idempotencyKey":%q (or --idempotency-key)`, r.GeneratedKey, r.GeneratedKey)
			}
		}
	}
	s.prog.Add(int64(len(res)))
	s.pending, s.slots, s.size = s.pending[:0], s.slots[:0], 0
}

// stopPending drops the messages not sent yet, and the results from the
// first of them on, when an interrupt stopped the input: handled is the
// last line (or argument) handled so far.
func (s *sender) stopPending(handled int) {
	s.interrupted = true
	s.after = handled
	if len(s.pending) > 0 {
		first := s.slots[0]
		s.after = s.results[first].Index - 1
		s.results = s.results[:first]
		s.pending, s.slots, s.size = nil, nil, 0
	}
}

// sendArgs sends the BODY arguments.
func (s *sender) sendArgs(base producer.Message, bodies []string) {
	s.of = len(bodies)
	for i, b := range bodies {
		if s.ctx.Err() != nil {
			s.stopPending(i)
			return
		}
		m := base
		m.Attributes = maps.Clone(base.Attributes)
		m.Body = b
		s.results = append(s.results, sendResult{Index: i + 1})
		if err := producer.Validate(m, false); err != nil {
			s.results[i].Error = sendErrorText(err)
			s.failed(i, m.GroupID, true)
			continue
		}
		s.add(m, i)
	}
	if s.ctx.Err() != nil {
		s.stopPending(len(bodies))
		return
	}
	s.flush()
}

// inputLine is a line of stdin, numbered from 1.
type inputLine struct {
	n       int
	text    []byte
	tooLong bool
	read    int64 // bytes of the input read so far
	err     error // a read error: the last item
}

// sendLines sends the lines of stdin as they are read, a call at a time.
//
// The lines are read by a goroutine of its own, so that an interrupt stops
// the send even while a read waits for input. sendLines owns it: it tells
// it to stop on return and waits for it, but no longer than sendReaderWait
// after an interrupt: a read of a terminal or a pipe cannot be cut short,
// and that goroutine then ends with its read, at the latest with the
// process.
func (s *sender) sendLines(base producer.Message, q sendQueue, raw bool) error {
	quit := make(chan struct{})
	lines := make(chan inputLine)
	readerDone := make(chan struct{})
	in, size := s.a.in, inputSize(s.a.in)
	go func() {
		defer close(readerDone)
		readLines(in, lines, quit)
	}()
	defer func() {
		close(quit)
		select {
		case <-readerDone:
		case <-time.After(sendReaderWait):
		}
	}()

	handled := 0 // the last line handled
	for {
		if s.ctx.Err() != nil {
			s.stopPending(handled)
			return nil
		}
		var l inputLine
		var ok bool
		select {
		case <-s.ctx.Done():
			s.stopPending(handled)
			return nil
		case l, ok = <-lines:
		}
		if !ok {
			break
		}
		if l.err != nil {
			s.flush()
			return fmt.Errorf("reading stdin: %w", l.err)
		}
		s.prog.SetPosition(l.read, size)
		handled = l.n
		if l.n == 1 { // a file saved with a byte order mark: not the body's
			l.text = bytes.TrimPrefix(l.text, []byte("\ufeff"))
		}
		switch {
		case l.tooLong:
			s.results = append(s.results, sendResult{Index: l.n, Error: fmt.Sprintf("the line is over %d MiB; a message is at most 1 MiB", sendMaxLine>>20)})
			s.failed(len(s.results)-1, "", false)
		case len(bytes.TrimSpace(l.text)) == 0:
			// skipped
		default:
			var m producer.Message
			var err error
			if raw {
				m = base
				m.Attributes = maps.Clone(base.Attributes)
				m.Body = string(l.text)
				err = checkForQueue(m, q)
			} else {
				m, err = parseSendLine(l.text, base, q)
			}
			if err == nil {
				err = s.sharedByFlag(m, base, l.n)
			}
			s.results = append(s.results, sendResult{Index: l.n})
			if err != nil {
				r := &s.results[len(s.results)-1]
				r.Error = err.Error()
				group, known := base.GroupID, raw
				if !raw {
					group, known = lineGroup(l.text, base)
				}
				s.failed(len(s.results)-1, group, known)
				var he *hintError
				if errors.As(err, &he) {
					r.hint = he.hint
				}
				break
			}
			s.add(m, len(s.results)-1)
		}
	}
	if s.ctx.Err() != nil {
		s.stopPending(handled)
		return nil
	}
	s.flush()
	return nil
}

// readLines reads the lines of in and sends them on lines, until the end
// of the input, a read error (sent as the last item) or quit. It closes
// lines at the end of the input.
func readLines(in io.Reader, lines chan<- inputLine, quit <-chan struct{}) {
	cr := &countingReader{r: in}
	r := bufio.NewReaderSize(cr, 64<<10)
	for n := 1; ; n++ {
		line, tooLong, err := readLine(r, sendMaxLine)
		l := inputLine{n: n, text: line, tooLong: tooLong, read: cr.n - int64(r.Buffered())}
		switch {
		case err == io.EOF:
			close(lines)
			return
		case err != nil:
			l = inputLine{err: err}
		}
		select {
		case lines <- l:
		case <-quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// countingReader counts the bytes read through it. Only its reader's
// goroutine uses it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// inputSize is the size of in when it is a regular file, for the progress
// line; else 0.
func inputSize(in io.Reader) int64 {
	f, ok := in.(*os.File)
	if !ok {
		return 0
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return 0
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0
	}
	return st.Size() - off
}

// outcomeUnknown reports whether a message that failed may have reached
// SQS: its request got no answer (a network error after the connection was
// made, a timeout, a request cut short) or a 5xx one, or SQS failed its
// entry on its side (SenderFault false), which it may do for a message it
// stored.
func outcomeUnknown(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee *producer.EntryError
	if errors.As(err, &ee) {
		return !ee.SenderFault // failed on SQS's side: it may have stored it
	}
	var op *smithy.OperationError
	if !errors.As(err, &op) {
		return false // not a request: a message the producer refused
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() != 0 {
		return re.HTTPStatusCode() >= 500
	}
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Op == "dial" {
		return false // no connection, no request
	}
	return true
}

// print prints the results: a summary by default, the rows with -o table,
// JSON with -o json.
func (s *sender) print() error {
	a := s.a
	switch {
	case a.output == "json":
		results := s.results
		if results == nil {
			results = []sendResult{}
		}
		return a.printJSON(results)
	case a.outputSet:
		rows := make([][]string, len(s.results))
		for i, r := range s.results {
			rows[i] = []string{strconv.Itoa(r.Index), r.MessageID, r.Error}
		}
		return a.table([]string{"INDEX", "MESSAGE ID", "ERROR"}, rows)
	case a.quiet:
		return nil
	}
	sent := 0
	for _, r := range s.results {
		if r.MessageID != "" {
			sent++
		}
	}
	if sent == len(s.results) {
		_, err := fmt.Fprintf(a.out, "sent %d\n", sent)
		return err
	}
	_, err := fmt.Fprintf(a.out, "sent %d of %d\n", sent, len(s.results))
	return err
}

// outcome is the error send returns: the messages not sent, and the
// interrupt.
func (s *sender) outcome() error {
	var details, hints, maybe []string
	failed := 0
	for _, r := range s.results {
		if r.Error == "" {
			continue
		}
		failed++
		if r.MaybeSent {
			maybe = append(maybe, strconv.Itoa(r.Index))
		}
		if len(details) < sendMaxDetails {
			details = append(details, fmt.Sprintf("%s %d: %s", s.what, r.Index, r.Error))
		}
		if r.hint != "" && !containsString(hints, r.hint) {
			hints = append(hints, r.hint)
		}
	}
	var msg []string
	if failed > 0 {
		m := fmt.Sprintf("%d of %d messages not sent:\n  %s", failed, len(s.results), strings.Join(details, "\n  "))
		if failed > len(details) {
			m += fmt.Sprintf("\n  and %d more (see the output with -o table or -o json)", failed-len(details))
		}
		for _, h := range hints {
			m += "\n  hint: " + h
		}
		msg = append(msg, m)
	}
	if !s.interrupted {
		if failed == 0 {
			return nil
		}
		return errors.New(msg[0])
	}
	var what string
	switch {
	case s.what == "message" && s.after == 0:
		what = fmt.Sprintf("interrupted before any message was sent; none of the %d was", s.of)
	case s.what == "message":
		what = fmt.Sprintf("interrupted after message %d of %d: messages %d to %d were not sent", s.after, s.of, s.after+1, s.of)
	case s.after == 0:
		what = "interrupted before the first line was handled; nothing was sent"
	case s.firstHeld() > 0:
		// On a FIFO queue, a line not sent holds its group's later
		// lines: resuming after the last line handled would leave it
		// out, and its group out of order.
		first := s.firstHeld()
		what = fmt.Sprintf("interrupted after line %d; line %d, of a FIFO group, was not sent: resume with `tail -n +%d`, "+
			"within 5 minutes of the first sends (SQS drops the lines after it that were sent, sent again with their deduplication IDs, only that long)",
			s.after, first, first)
	default:
		what = fmt.Sprintf("interrupted after line %d; resume with `tail -n +%d`", s.after, s.after+1)
	}
	if len(maybe) > 0 {
		what += fmt.Sprintf("\n  %s %s may have been sent: the second interrupt cut their request short", s.what+"s", strings.Join(maybe, ", "))
	}
	if len(msg) > 0 {
		what = msg[0] + "\n" + what
	}
	return &interruptedError{msg: what}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// scheduleBodies returns the body of the occurrence --schedule and
// --scheduled-time describe, with payloads' only element as its payload:
// the envelope of package schedule.
func (f sendFlags) scheduleBodies(payloads []string, now time.Time) ([]string, error) {
	switch {
	case f.schedule == "":
		return nil, usageError{errors.New("--scheduled-time needs --schedule NAME")}
	case f.raw:
		return nil, usageError{errors.New("--schedule sends one occurrence: give its payload as a BODY argument, not --raw lines")}
	case len(payloads) > 1:
		return nil, usageError{fmt.Errorf("--schedule with %d BODY arguments: an occurrence has one payload (copies of it share its idempotency key, and only the first would run)", len(payloads))}
	case f.idempotencyKey != "":
		return nil, usageError{errors.New("--idempotency-key with --schedule: the key of an occurrence is schedule:NAME@TIME, from its envelope (schedule.Key)")}
	}
	at := now.UTC().Truncate(time.Minute)
	if f.scheduledTime != "" {
		t, err := time.Parse(time.RFC3339, f.scheduledTime)
		if err != nil {
			return nil, usageError{fmt.Errorf("--scheduled-time %q: want an RFC 3339 time such as 2026-12-01T03:00:00Z", f.scheduledTime)}
		}
		at = t
	}
	var payload any
	if len(payloads) == 1 {
		if !json.Valid([]byte(payloads[0])) {
			return nil, usageError{errors.New("--schedule: the BODY is the occurrence's payload and must be JSON, such as '{\"report\":\"sales\"}' or '\"text\"'")}
		}
		payload = json.RawMessage(payloads[0])
	}
	body, err := schedule.Envelope(f.schedule, at, payload)
	if err != nil {
		return nil, usageError{fmt.Errorf("--schedule: %w", err)}
	}
	return []string{body}, nil
}

// message returns the message the flags describe, without a body.
func (f sendFlags) message() (producer.Message, error) {
	m := producer.Message{
		IdempotencyKey:  f.idempotencyKey,
		Delay:           f.delay,
		GroupID:         f.group,
		DeduplicationID: f.dedupID,
	}
	for _, kv := range f.attrs {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return m, usageError{fmt.Errorf("--attr %q: want name=value", kv)}
		}
		if _, dup := m.Attributes[name]; dup {
			return m, usageError{fmt.Errorf("--attr %q: attribute %q is given twice", kv, name)}
		}
		if m.Attributes == nil {
			m.Attributes = map[string]sqsworker.MessageAttribute{}
		}
		m.Attributes[name] = sqsworker.MessageAttribute{DataType: "String", StringValue: value}
	}
	// A flag that is wrong for every message is a usage error; what
	// depends on the body is checked per message.
	probe := m
	probe.Body = "x"
	if err := producer.Validate(probe, false); err != nil {
		return m, usageError{fmt.Errorf("the flags describe a message SQS would refuse: %s", sendErrorText(err))}
	}
	return m, nil
}

// sendQueue resolves the queue and reads whether it is FIFO and
// deduplicates by content.
func (a *app) sendQueue(ctx context.Context, queueArg string) (sendQueue, error) {
	url, err := resolveQueueArg(ctx, a, queueArg)
	if err != nil {
		return sendQueue{}, err
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return sendQueue{}, err
	}
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameContentBasedDeduplication},
	})
	if err != nil {
		return sendQueue{}, a.queueError(queueArg, err)
	}
	return sendQueue{
		url:          url,
		fifo:         strings.HasSuffix(url, ".fifo") || out.Attributes["FifoQueue"] == "true",
		contentDedup: out.Attributes["ContentBasedDeduplication"] == "true",
	}, nil
}

// checkFlags checks the flags that BODY arguments and --raw lines are sent
// with against the queue, so that a mistake is one clear error rather than
// one per message.
func (q sendQueue) checkFlags(f sendFlags, queueArg string) error {
	switch {
	case q.fifo && f.group == "":
		return usageError{fmt.Errorf("%s is a FIFO queue: --group is required", queueArg)}
	case q.fifo && f.dedupID == "" && !q.contentDedup && f.raw:
		return usageError{fmt.Errorf("%s is a FIFO queue without content-based deduplication: --raw lines would need a deduplication ID each; use JSON lines with a deduplicationId", queueArg)}
	case q.fifo && f.dedupID == "" && !q.contentDedup:
		return usageError{fmt.Errorf("%s is a FIFO queue without content-based deduplication: --dedup-id is required", queueArg)}
	case q.fifo && f.delay != 0:
		return usageError{fmt.Errorf("%s is a FIFO queue: it takes no per-message --delay (set the queue's DelaySeconds instead)", queueArg)}
	case !q.fifo && f.dedupID != "":
		return usageError{fmt.Errorf("%s is a standard queue: --dedup-id is for FIFO queues", queueArg)}
	}
	return nil
}

// readLine reads a line of at most max bytes, without its end of line.
// tooLong is true when the line was longer; its bytes were discarded. err is
// io.EOF at the end of the input, with the last line if it had no newline.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+2 { // room for \r\n
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) == 0 && !tooLong {
			return nil, false, io.EOF
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if err == io.EOF {
			// The last line, without a newline: report it, then EOF.
			return line, tooLong, nil
		}
		return line, tooLong, err
	}
}

// sendLine is one JSON line of send's input.
type sendLine struct {
	Body            *string                    `json:"body"`
	IdempotencyKey  *string                    `json:"idempotencyKey"`
	DelaySeconds    *int64                     `json:"delaySeconds"`
	GroupID         *string                    `json:"groupId"`
	DeduplicationID *string                    `json:"deduplicationId"`
	Attributes      map[string]json.RawMessage `json:"attributes"`
}

// parseSendLine turns a JSON line into a message, with the flags' values as
// defaults, and checks it for the queue.
func parseSendLine(line []byte, base producer.Message, q sendQueue) (producer.Message, error) {
	var l sendLine
	trimmed := bytes.TrimSpace(line)
	if trimmed[0] != '{' {
		return producer.Message{}, &hintError{errors.New(`not a JSON object; want {"body": "...", ...}`), rawHint}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return producer.Message{}, &hintError{fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: ")), rawHint}
	}
	if _, err := dec.Token(); err != io.EOF {
		return producer.Message{}, &hintError{errors.New("invalid JSON: more after the object"), rawHint}
	}
	if l.Body == nil {
		return producer.Message{}, &hintError{errors.New(`no "body"`), rawHint}
	}
	m := base
	m.Body = *l.Body
	m.Attributes = maps.Clone(base.Attributes)
	if l.IdempotencyKey != nil {
		m.IdempotencyKey = *l.IdempotencyKey
	}
	if l.GroupID != nil {
		m.GroupID = *l.GroupID
	}
	if l.DeduplicationID != nil {
		m.DeduplicationID = *l.DeduplicationID
	}
	if l.DelaySeconds != nil {
		d := *l.DelaySeconds
		if max := int64(sqsworker.MaxDelay / time.Second); d < 0 || d > max {
			// Over SQS's 15 minutes the runtimes hold the job back, as
			// for --delay.
			return producer.Message{}, fmt.Errorf("delaySeconds %d is not in 0..%d (365 days)", d, max)
		}
		m.Delay = time.Duration(d) * time.Second
	}
	for name, raw := range l.Attributes {
		attr, err := parseSendAttribute(name, raw)
		if err != nil {
			return producer.Message{}, err
		}
		if m.Attributes == nil {
			m.Attributes = map[string]sqsworker.MessageAttribute{}
		}
		m.Attributes[name] = attr
	}
	return m, checkForQueue(m, q)
}

// lineGroup returns the group of a JSON line parseSendLine refused: its
// "groupId", or base's; known is false when the line is not a JSON object
// whose "groupId" can be read.
func lineGroup(line []byte, base producer.Message) (group string, known bool) {
	var l struct {
		GroupID *string `json:"groupId"`
	}
	if json.Unmarshal(bytes.TrimSpace(line), &l) != nil {
		return "", false
	}
	if l.GroupID != nil {
		return *l.GroupID, true
	}
	return base.GroupID, true
}

// checkForQueue checks a message for the queue: what SQS would refuse, and
// the group and deduplication ID a FIFO queue needs.
func checkForQueue(m producer.Message, q sendQueue) error {
	var problems []string
	if err := producer.Validate(m, q.fifo); err != nil {
		problems = append(problems, sendErrorText(err))
	}
	if q.fifo && m.GroupID == "" {
		problems = append(problems, `set "groupId" or --group`)
	}
	if q.fifo && m.DeduplicationID == "" && !q.contentDedup {
		problems = append(problems, `the queue has no content-based deduplication: set "deduplicationId" on each line`)
	}
	if !q.fifo && m.DeduplicationID != "" {
		problems = append(problems, "a deduplication ID is for FIFO queues")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// hintError is an error with a hint on how to avoid it, given once in the
// summary of the lines that failed.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// parseSendAttribute reads an attribute of a JSON line: a string, a number,
// or an object with dataType and stringValue or binaryValue.
func parseSendAttribute(name string, raw json.RawMessage) (sqsworker.MessageAttribute, error) {
	raw = bytes.TrimSpace(raw)
	bad := func(format string, args ...any) (sqsworker.MessageAttribute, error) {
		return sqsworker.MessageAttribute{}, fmt.Errorf("attribute %q: "+format, append([]any{name}, args...)...)
	}
	if len(raw) == 0 {
		return bad("no value")
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return bad("%v", err)
		}
		return sqsworker.MessageAttribute{DataType: "String", StringValue: s}, nil
	case c == '-' || c >= '0' && c <= '9':
		return sqsworker.MessageAttribute{DataType: "Number", StringValue: string(raw)}, nil
	case c == '{':
		var v struct {
			DataType    string  `json:"dataType"`
			StringValue *string `json:"stringValue"`
			BinaryValue []byte  `json:"binaryValue"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return bad("%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		if v.DataType == "" {
			return bad(`no "dataType" (String, Number or Binary)`)
		}
		binary := strings.HasPrefix(v.DataType, "Binary")
		if binary && v.StringValue != nil {
			return bad(`a %s attribute takes a "binaryValue" (base64), not a "stringValue"`, v.DataType)
		}
		if !binary && v.BinaryValue != nil {
			return bad(`a %s attribute takes a "stringValue", not a "binaryValue"`, v.DataType)
		}
		a := sqsworker.MessageAttribute{DataType: v.DataType, BinaryValue: v.BinaryValue}
		if v.StringValue != nil {
			a.StringValue = *v.StringValue
		}
		return a, nil
	}
	return bad(`want a string, a number, or {"dataType": ..., "stringValue": ...}`)
}

// refusedIndex matches the batch position the producer puts in the error of
// an entry SQS refused, which means nothing to the CLI's user.
var refusedIndex = regexp.MustCompile(`SQS refused message \d+: `)

// failedIndex matches the producer's text of an entry SQS failed on its
// side, to be said of the line.
var failedIndex = regexp.MustCompile(`SQS failed on its side message \d+: `)

// sendingTo matches the queue URL the producer puts in the error of a
// request: the CLI's user gave the queue.
var sendingTo = regexp.MustCompile(`sending to \S+: `)

// sendErrorText is err as one line, without the producer's prefixes.
func sendErrorText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	s = strings.ReplaceAll(s, "producer: invalid message: ", "")
	s = strings.ReplaceAll(s, "producer: ", "")
	s = refusedIndex.ReplaceAllString(s, "SQS refused it: ")
	s = failedIndex.ReplaceAllString(s, "SQS failed it on its side: ")
	s = sendingTo.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, "\n", "; ")
}

// resolveQueueArg turns a queue name, URL or ARN into its URL, with a clear error
// when the queue does not exist.
func resolveQueueArg(ctx context.Context, a *app, nameOrURL string) (string, error) {
	// The errors of the configuration say what to do on their own.
	if _, err := a.sqs(ctx); err != nil {
		return "", err
	}
	url, err := a.queueURL(ctx, nameOrURL)
	if err != nil {
		return "", a.queueError(nameOrURL, err)
	}
	return url, nil
}

// isTTY reports whether v is a terminal.
func isTTY(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
