package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
)

// peekFlags are the flags of the commands that look at a dead-letter queue
// without changing it.
type peekFlags struct {
	visibility time.Duration
	max        int
	body       bool
}

func (p *peekFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&p.visibility, "visibility", defaultPeekVisibility,
		"visibility timeout of the messages while they are read (whole seconds, 1s to 12h); they are released at once after")
	f.IntVar(&p.max, "max", defaultPeekMax, "read at most this many messages")
	f.BoolVar(&p.body, "body", false, "print the message bodies (never printed by default)")
}

func (p *peekFlags) validate() error {
	if err := validateVisibility(p.visibility); err != nil {
		return err
	}
	if p.max < 1 {
		return usageError{fmt.Errorf("--max %d: want at least 1", p.max)}
	}
	return nil
}

const peekHelp = `
SQS has no peek: the messages are received with a visibility timeout of
--visibility (30s by default), up to --max of them, until no more come; then
they are all made visible again at once (ChangeMessageVisibilityBatch to 0).
Meanwhile other consumers of the queue do not see them, and each read counts
as a receive. On a FIFO queue SQS hands out a message group's messages only
while none of the group is in flight, so only the first messages of each
group are seen. What was read is compared with the queue's approximate
count: "saw 65 of about 75 messages" says some were not seen, and why.

The failure metadata is message attributes, which whoever sends a message
can set: METADATA says "unverified" when its source queue does not send its
dead letters to this queue, or when SQS's own redrive moved the message here
(its metadata then came with it); show says why.`

func (d *dlqCmd) newListCmd() *cobra.Command {
	var p peekFlags
	var ff filterFlags
	var summary bool
	cmd := &cobra.Command{
		Use:   "ls DLQ",
		Short: "List a dead-letter queue's messages with their failure metadata",
		Long: `List the messages of a dead-letter queue with their failure metadata (error
class, error text, attempts, first-received and failed-at times, source queue,
original message ID, whether it was verified) and their other message
attributes, oldest failure first. Bodies are printed only with --body. The
filters of replay select what is listed.
` + peekHelp + "\n" + filterHelp,
		Example: `  sqsworker dlq ls orders-dlq
  sqsworker dlq ls orders-dlq --body --max 50
  sqsworker dlq ls orders-dlq --error-class upstream-unavailable --since "2h ago"
  sqsworker dlq ls https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq -o json`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := d.a
			if err := p.validate(); err != nil {
				return err
			}
			filter, err := ff.parse(time.Now())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			q, err := d.open(ctx, args[0])
			if err != nil {
				return err
			}
			// On a terminal: how many were read, how fast, and how long is
			// left against the queue's approximate count.
			pr := a.progress("read", "messages")
			if pr != nil {
				if n, err := q.Counts(ctx); err == nil && n.Visible+n.InFlight > 0 {
					pr.SetTotal(int64(min(n.Visible+n.InFlight, p.max)))
				}
			}
			read := 0
			res, err := q.Scan(ctx, dlq.ScanConfig{Filter: filter, Max: p.max, Visibility: p.visibility,
				Progress: func(pg dlq.Progress) { pr.Add(int64(pg.Scanned - read)); read = pg.Scanned }})
			pr.Finish()
			if err != nil {
				return err
			}
			ms := res.Messages
			if summary {
				if err := a.summarize(ms); err != nil {
					return err
				}
			} else if a.output == "json" {
				out := make([]messageJSON, len(ms))
				for i, m := range ms {
					out[i] = toMessageJSON(m, p.body)
				}
				if err := a.printJSON(out); err != nil {
					return err
				}
			} else if err := a.table(listHeader(p.body, res.Duplicates > 0), listRows(ms, p.body, res.Duplicates > 0)); err != nil {
				return err
			}
			if filter.String() == "all messages" {
				fmt.Fprintf(a.err, "%d message(s) in %s, read with a %s visibility timeout and released at once\n",
					len(ms), q.Name, p.visibility)
			} else {
				fmt.Fprintf(a.err, "%d of %d message(s) in %s match %s; read with a %s visibility timeout and released at once\n",
					len(ms), res.Scanned, q.Name, filter, p.visibility)
			}
			if n := countUnverified(ms); n > 0 {
				fmt.Fprintf(a.err, "%d message(s) carry failure metadata that could not be verified (METADATA unverified; dlq show says why): replay never takes their destination from it\n", n)
			}
			if res.Duplicates > 0 {
				fmt.Fprintf(a.err, "%d message(s) are duplicate copies of a job listed before them (DUPLICATE OF: the same original message ID, source queue, body and attributes; a dead-letter send whose reply was lost, sent again): dlq replay moves one copy per job and deletes the others\n", res.Duplicates)
			}
			if res.Truncated {
				fmt.Fprintf(a.err, "stopped at --max %d: the queue may hold more\n", p.max)
			}
			d.coverage(res.Coverage)
			return nil
		},
	}
	p.add(cmd)
	ff.add(cmd, "list")
	cmd.Flags().BoolVar(&summary, "summary", false, "count the messages per error class and source queue instead of listing them")
	return cmd
}

// classCount is one row of dlq ls --summary.
type classCount struct {
	ErrorClass  string    `json:"errorClass"`
	SourceQueue string    `json:"sourceQueue"`
	Messages    int       `json:"messages"`
	LastFailed  time.Time `json:"lastFailed,omitzero"`
}

// redrivenClass is the error class a summary counts the messages SQS's own
// redrive moved under: the failure that brought them is not known.
const redrivenClass = "(moved by SQS's redrive)"

// summarize prints the messages counted per error class and source queue,
// the most frequent first.
func (a *app) summarize(ms []*dlq.Message) error {
	byKey := map[[2]string]*classCount{}
	var counts []*classCount
	for _, m := range ms {
		k := [2]string{orDash(m.Failure.ErrorClass), orDash(queueName(m.Failure.SourceQueue))}
		if m.Redriven() {
			// Its metadata, if any, is of an earlier failure: counted
			// apart, as --error-class never selects it.
			from := m.RedriveSource
			if a, err := dlq.ParseARN(from); err == nil {
				from = a.Name
			}
			k = [2]string{redrivenClass, from}
		}
		c := byKey[k]
		if c == nil {
			c = &classCount{ErrorClass: k[0], SourceQueue: k[1]}
			byKey[k] = c
			counts = append(counts, c)
		}
		c.Messages++
		if !m.Redriven() && m.Failure.FailedAt.After(c.LastFailed) {
			c.LastFailed = m.Failure.FailedAt
		}
	}
	sort.SliceStable(counts, func(i, j int) bool {
		if counts[i].Messages != counts[j].Messages {
			return counts[i].Messages > counts[j].Messages
		}
		return counts[i].ErrorClass < counts[j].ErrorClass
	})
	if a.output == "json" {
		return a.printJSON(counts)
	}
	rows := make([][]string, len(counts))
	for i, c := range counts {
		rows[i] = []string{c.ErrorClass, c.SourceQueue, strconv.Itoa(c.Messages), fmtTime(c.LastFailed)}
	}
	return a.table([]string{"ERROR CLASS", "SOURCE", "MESSAGES", "LAST FAILED"}, rows)
}

func countUnverified(ms []*dlq.Message) int {
	n := 0
	for _, m := range ms {
		if m.HasFailure && !m.Verified() {
			n++
		}
	}
	return n
}

func (d *dlqCmd) newShowCmd() *cobra.Command {
	var p peekFlags
	cmd := &cobra.Command{
		Use:   "show DLQ MESSAGE_ID",
		Short: "Show one dead-letter message: failure metadata, attributes and, with --body, body",
		Long: `Show one message of a dead-letter queue: its failure metadata and whether it
was verified, its message attributes and, with --body, its body (its control
characters but newlines and tabs shown as U+FFFD, so that none reaches the
terminal; -o json gives it exactly). MESSAGE_ID is its ID in the dead-letter
queue or its original ID (the one it had in its source queue). The read stops
at the message.
` + peekHelp,
		Example: `  sqsworker dlq show orders-dlq 5f1c0a4e-8d0b-4c1e-9a57-3f2b6d1e0c11
  sqsworker dlq show orders-dlq 5f1c0a4e-8d0b-4c1e-9a57-3f2b6d1e0c11 --body -o json`,
		Args: exactArgs(2, "DLQ MESSAGE_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := d.a
			if err := p.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			q, err := d.open(ctx, args[0])
			if err != nil {
				return err
			}
			id := args[1]
			var found *dlq.Message
			res, err := q.Scan(ctx, dlq.ScanConfig{Max: p.max, Visibility: p.visibility, Until: func(m *dlq.Message) bool {
				if m.ID == id || (m.HasFailure && m.Failure.MessageID == id) {
					found = m
					return true
				}
				return false
			}})
			if err != nil {
				return err
			}
			if found == nil {
				more := ""
				if res.Truncated {
					more = fmt.Sprintf(" (stopped at --max %d)", p.max)
				}
				d.coverage(res.Coverage)
				return fmt.Errorf("no message with ID %s among the %d message(s) read from %s%s",
					id, res.Scanned, q.Name, more)
			}
			if a.output == "json" {
				return a.printJSON(toMessageJSON(found, p.body))
			}
			return a.showMessage(found, p.body)
		},
	}
	p.add(cmd)
	return cmd
}

// messageJSON is a dead-letter message in -o json output.
type messageJSON struct {
	MessageID         string             `json:"messageId"`
	OriginalMessageID string             `json:"originalMessageId"`
	GroupID           string             `json:"groupId,omitempty"`
	Failure           *sqsworker.Failure `json:"failure"`
	// Metadata is "verified", "unverified" or "none".
	Metadata      string                   `json:"metadata"`
	Unverified    string                   `json:"unverified,omitempty"`
	RedriveSource string                   `json:"redriveSource,omitempty"`
	DuplicateOf   string                   `json:"duplicateOf,omitempty"`
	Replays       int                      `json:"replays"`
	Attributes    map[string]attributeJSON `json:"attributes"`
	Body          *string                  `json:"body,omitempty"`
}

type attributeJSON struct {
	Type   string `json:"type"`
	Value  string `json:"value,omitempty"`
	Binary []byte `json:"binary,omitempty"`
}

func toMessageJSON(m *dlq.Message, body bool) messageJSON {
	out := messageJSON{
		MessageID:         m.ID,
		OriginalMessageID: m.OriginalID(),
		GroupID:           m.GroupID,
		Metadata:          metadataState(m),
		Unverified:        m.Unverified,
		RedriveSource:     m.RedriveSource,
		DuplicateOf:       m.DuplicateOf,
		Replays:           m.Replays,
		Attributes:        map[string]attributeJSON{},
	}
	if m.HasFailure {
		f := m.Failure
		out.Failure = &f
	}
	for k, v := range m.MessageAttributes {
		if !sqsworker.IsFailureAttribute(k) {
			out.Attributes[k] = attributeJSON{Type: v.DataType, Value: v.StringValue, Binary: v.BinaryValue}
		}
	}
	if body {
		b := m.Body
		out.Body = &b
	}
	return out
}

// metadataState is "verified", "unverified" or "none".
func metadataState(m *dlq.Message) string {
	switch {
	case !m.HasFailure:
		return "none"
	case m.Verified():
		return "verified"
	}
	return "unverified"
}

// listHeader is the header of dlq ls's table: with a DUPLICATE OF column
// when dups (some messages listed are copies of a job listed before them).
func listHeader(body, dups bool) []string {
	h := []string{"MESSAGE ID", "FAILED AT", "ERROR CLASS", "ATTEMPTS", "FIRST RECEIVED", "SOURCE", "METADATA", "ORIGINAL ID", "ATTRIBUTES", "ERROR"}
	if dups {
		h = append(h, "DUPLICATE OF")
	}
	if body {
		h = append(h, "BODY")
	}
	return h
}

func listRows(ms []*dlq.Message, body, dups bool) [][]string {
	rows := make([][]string, 0, len(ms))
	for _, m := range ms {
		f := m.Failure
		meta := metadataState(m)
		if meta == "none" {
			meta = "-"
		}
		r := []string{
			m.ID, fmtTime(f.FailedAt), orDash(f.ErrorClass), attemptsText(m), fmtTime(f.FirstReceived),
			orDash(queueName(f.SourceQueue)), meta, m.OriginalID(), attributesText(m.MessageAttributes), orDash(oneLine(f.Error, 60)),
		}
		if dups {
			r = append(r, orDash(m.DuplicateOf))
		}
		if body {
			r = append(r, oneLine(m.Body, 60))
		}
		for i := range r {
			r[i] = oneLine(r[i], 0) // every cell may come from the message
		}
		rows = append(rows, r)
	}
	return rows
}

func (a *app) showMessage(m *dlq.Message, body bool) error {
	f := m.Failure
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, oneLine(v, 0)) } // every value may come from the message
	line("Message ID", m.ID)
	line("Original ID", m.OriginalID())
	if m.GroupID != "" {
		line("Message group", m.GroupID)
	}
	if m.RedriveSource != "" {
		line("Moved by SQS from", m.RedriveSource)
	}
	if m.DuplicateOf != "" {
		line("Duplicate of", m.DuplicateOf+" (a copy of the same job: dlq replay moves one copy and deletes the others)")
	}
	if !m.HasFailure {
		line("Failure", "no sqsworker failure metadata")
	} else {
		if m.Verified() {
			line("Metadata", "verified: its source queue sends its dead letters here")
		} else {
			line("Metadata", "UNVERIFIED: "+m.Unverified)
		}
		line("Source queue", orDash(f.SourceQueue))
		line("Error class", orDash(f.ErrorClass))
		line("Error", orDash(oneLine(f.Error, 0)))
		line("Attempts", attemptsText(m))
		line("First received", fmtTime(f.FirstReceived))
		line("Failed at", fmtTime(f.FailedAt))
		line("Host", orDash(f.Host))
	}
	line("Replays", strconv.Itoa(m.Replays))
	names := make([]string, 0, len(m.MessageAttributes))
	for k := range m.MessageAttributes {
		if !sqsworker.IsFailureAttribute(k) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		line("Attributes", "none")
	} else {
		fmt.Fprintln(tw, "Attributes:")
		for _, k := range names {
			v := m.MessageAttributes[k]
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", oneLine(k, 0), oneLine(v.DataType, 0), oneLine(attributeValue(v), 0))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if body {
		_, err := fmt.Fprintf(a.out, "Body:\n%s\n", printable(m.Body))
		return err
	}
	return nil
}

// printable is a message's text as the terminal may show it: its lines and
// tabs kept, every other control character (an ESC sequence that would
// repaint the screen, a carriage return that would overwrite the line) as
// U+FFFD. -o json gives the text exactly.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, s)
}

func attemptsText(m *dlq.Message) string {
	if !m.HasFailure {
		return "-"
	}
	return strconv.Itoa(m.Failure.Attempts)
}

// attributesText lists the message attributes other than the failure
// metadata as name=value, sorted by name.
func attributesText(attrs map[string]sqsworker.MessageAttribute) string {
	var parts []string
	for k, v := range attrs {
		if !sqsworker.IsFailureAttribute(k) {
			parts = append(parts, k+"="+oneLine(attributeValue(v), 40))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func attributeValue(v sqsworker.MessageAttribute) string {
	if strings.HasPrefix(v.DataType, "Binary") {
		return fmt.Sprintf("(%d bytes)", len(v.BinaryValue))
	}
	return v.StringValue
}

// fmtTime formats a time for tables: UTC, to the second, so that columns keep
// one width.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine puts s on one line (line breaks and tabs become spaces, other
// control characters U+FFFD, so that a message's text cannot move the
// terminal's cursor or repaint what was printed) and, when n > 0, cuts it
// to n characters with an ellipsis.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.IsControl(r):
			return utf8.RuneError
		}
		return r
	}, s)
	if n > 0 && utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n-1]) + "…"
	}
	return s
}
