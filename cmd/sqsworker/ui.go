package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/cmd/sqsworker/internal/ui"
	"github.com/sqsworker/sqsworker/dlq"
)

func init() {
	commands = append(commands, newUICmd)
}

type uiOptions struct {
	addr         string
	prefix       string
	token        string
	allowActions bool
	force        bool
	interval     time.Duration
	scanMax      int
	audit        auditFlags
}

func newUICmd(a *app) *cobra.Command {
	var o uiOptions
	cmd := &cobra.Command{
		Use:   "ui [QUEUE...]",
		Short: "Serve a web dashboard: queue figures, dead-letter browser, replay and purge",
		Long: `Serve a web dashboard on --addr (default 127.0.0.1:8080) for the queues given
by name, URL or ARN, or every queue whose name starts with --prefix (ListQueues):

  Queues        visible, in flight and delayed messages, the dead-letter
                queue's depth, and charts of the last 10 minutes. The server
                reads the figures every --interval while a page is open, and
                stops 30s after the last page's poll. Each reading costs one
                GetQueueAttributes per queue and per dead-letter queue (and a
                ListQueues with --prefix): with 5s, 12 readings a minute.
  Dead letters  the messages of a dead-letter queue with their failure
                metadata, filtered by error class, attribute, time and text;
                a message's body and attributes only when you click it.
                SQS has no paging: a listing reads up to --scan-max
                messages (1000) and says when it stopped there, with the
                queue's approximate count; the page can read more, up to
                10000 at once (dlq ls --max has no bound).
  Replay        a dry run first (what would move where), then an explicit
                confirm, which moves exactly the messages the dry run showed
                (and deletes the duplicate copies of their jobs it found);
                the filtered set or the selected messages, to their source
                queue or another. A dry run stopped at --scan-max says so:
                only its messages move. A finished replay's status is kept
                for an hour (the newest 100); the audit log is its record.
  Purge         after typing the queue's name.
  Audit log     the records of --audit, which every replayed message and
                every purge is appended to (as with the dlq commands).

Safety: the dashboard is read-only unless --allow-actions. Actions are POSTs
that must carry a token made when the server starts (CSRF), from the page's
own origin; API reads (which receive the messages) are refused from another
site's page too. On a loopback address requests must name a loopback host (no DNS
rebinding). Binding another address needs an access token: --token, or one
made and printed once at start, or $SQSWORKER_UI_TOKEN (which, unlike
--token, other local users cannot read in the process list); open the
printed address, which keeps it in a cookie. Message bodies are never in a listing nor in the server's log.
Ctrl-C (SIGINT) or SIGTERM shuts down gracefully; a replay under way stops
between two messages, which loses nothing.`,
		Example: `  sqsworker ui orders payments
  sqsworker ui --prefix orders- --allow-actions
  sqsworker ui --prefix prod- --addr 0.0.0.0:8080   # prints an access token`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUI(cmd, a, args, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", ui.DefaultAddr, "address to listen on, host:port; a non-loopback host needs an access token")
	f.StringVar(&o.prefix, "prefix", "", "show every queue whose name starts with this prefix (instead of, or besides, QUEUE arguments)")
	f.StringVar(&o.token, "token", "", "access token every request must carry (default: $"+uiTokenEnv+"; without it none on a loopback address, else one made and printed at start); the variable keeps it out of the process list")
	f.BoolVar(&o.allowActions, "allow-actions", false, "enable replay and purge (default: read-only)")
	f.BoolVar(&o.force, "force", false, "act on queues even if they do not look like dead-letter queues")
	f.DurationVar(&o.interval, "interval", ui.DefaultSampleInterval, "how often the queue figures are read while a page is open")
	f.IntVar(&o.scanMax, "scan-max", ui.DefaultScanMax, fmt.Sprintf("messages a listing or a dry run reads unless the page asks for more (1 to %d)", ui.MaxScanMax))
	o.audit.add(cmd, "")
	return cmd
}

// uiTokenEnv gives the access token when --token does not.
const uiTokenEnv = "SQSWORKER_UI_TOKEN"

func runUI(cmd *cobra.Command, a *app, args []string, o uiOptions) error {
	ctx := cmd.Context()
	if len(args) == 0 && !cmd.Flags().Changed("prefix") {
		return usageError{errors.New("ui takes QUEUE arguments or --prefix (\"\" for every queue); see --help")}
	}
	if o.interval < time.Second {
		return usageError{fmt.Errorf("--interval %s: want 1s or more", o.interval)}
	}
	if o.scanMax < 1 || o.scanMax > ui.MaxScanMax {
		return usageError{fmt.Errorf("--scan-max %d: want 1 to %d (for more, dlq ls --max and dlq replay have no such bound)", o.scanMax, ui.MaxScanMax)}
	}
	if err := o.audit.validate(); err != nil {
		return err
	}
	loopback, err := ui.IsLoopback(o.addr)
	if err != nil {
		return usageError{fmt.Errorf("--addr: %w", err)}
	}
	if !cmd.Flags().Changed("token") {
		o.token = os.Getenv(uiTokenEnv)
	}
	printToken := false
	if !loopback && o.token == "" {
		o.token, printToken = ui.RandomToken(), true
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	var urls []string
	for _, arg := range args {
		u, err := resolveQueueArg(ctx, a, arg)
		if err != nil {
			return err
		}
		urls = append(urls, u)
	}
	stats := &uiStats{a: a, c: c, urls: urls, prefix: o.prefix, listed: cmd.Flags().Changed("prefix")}
	d := &dlqCmd{a: a, force: o.force}
	var audit dlq.Audit
	if o.allowActions {
		au, closeAudit, err := d.openAudit(ctx, o.audit)
		if err != nil {
			return err
		}
		defer closeAudit()
		audit = au
	}
	auditFile := o.audit.file
	if auditFile == "-" {
		auditFile = ""
	}
	log := slog.New(slog.NewTextHandler(a.errs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := ui.New(ui.Config{
		Addr: o.addr, Token: o.token, AllowActions: o.allowActions, SQS: c, Stats: stats.read, Listed: stats.listed,
		Audit: audit, AuditFile: auditFile, Force: o.force, SampleInterval: o.interval, ScanMax: o.scanMax, Logger: log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", o.addr, err)
	}
	mode := "read-only (--allow-actions enables replay and purge)"
	if o.allowActions {
		mode = "actions enabled; audit log: " + o.audit.where()
	}
	fmt.Fprint(a.errs, uiStartMessage("http://"+ln.Addr().String()+"/", o.token, printToken, mode))
	return srv.Serve(ctx, ln)
}

// uiStartMessage is what ui prints at start: the address to open, with
// the access token when ui made it (printed this once), without it when
// --token gave it (stderr often ends in a log).
func uiStartMessage(url, token string, made bool, mode string) string {
	switch {
	case made:
		return fmt.Sprintf("sqsworker ui: serving %s?token=%s — %s; Ctrl-C to stop\n"+
			"  the access token is in that address, printed this once (give --token to choose it)\n", url, token, mode)
	case token != "":
		return fmt.Sprintf("sqsworker ui: serving %s — %s; Ctrl-C to stop\n"+
			"  open it with ?token= and your --token, or send Authorization: Bearer\n", url, mode)
	}
	return fmt.Sprintf("sqsworker ui: serving %s — %s; Ctrl-C to stop\n", url, mode)
}

// uiStats reads the queues' figures for the dashboard, with the reader of
// `sqsworker stats`.
type uiStats struct {
	a      *app
	c      *sqs.Client
	urls   []string
	prefix string
	listed bool
	reader *statsReader
}

func (s *uiStats) read(ctx context.Context) ([]ui.QueueStats, error) {
	if s.reader == nil {
		s.reader = &statsReader{a: s.a, client: s.c, dlqURLs: map[string]string{}}
	}
	urls := s.urls
	if s.listed {
		listed, err := s.list(ctx)
		if err != nil {
			return nil, err
		}
		for _, u := range listed {
			if !containsString(urls, u) {
				urls = append(urls, u)
			}
		}
	}
	out := make([]ui.QueueStats, 0, len(urls))
	for _, u := range urls {
		r, err := s.reader.readOne(ctx, u, u)
		if err != nil {
			if isQueueMissing(err) {
				continue // deleted since it was listed
			}
			return nil, err
		}
		q := ui.QueueStats{Queue: r.Queue, URL: r.URL, Visible: r.Visible, InFlight: r.InFlight, Delayed: r.Delayed, FIFO: r.FIFO}
		if d := r.DeadLetterQueue; d != nil {
			q.DLQ = &ui.DLQStats{Queue: d.Queue, URL: d.URL, MaxReceiveCount: d.MaxReceiveCount, Missing: d.Missing, Depth: d.Visible + d.InFlight + d.Delayed}
		}
		out = append(out, q)
	}
	return out, nil
}

// list returns the URLs of the queues whose name starts with the prefix.
func (s *uiStats) list(ctx context.Context) ([]string, error) {
	var urls []string
	in := &sqs.ListQueuesInput{MaxResults: aws.Int32(1000)}
	if s.prefix != "" {
		in.QueueNamePrefix = aws.String(s.prefix)
	}
	for {
		out, err := s.c.ListQueues(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("listing the queues: %w", err)
		}
		urls = append(urls, out.QueueUrls...)
		if out.NextToken == nil || len(urls) >= 1000 {
			return urls, nil
		}
		in.NextToken = out.NextToken
	}
}
