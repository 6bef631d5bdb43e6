package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/dlq"
)

// defaultAuditFile is where the dlq commands append their audit log by
// default, in the current directory.
const defaultAuditFile = "sqsworker-replay.jsonl"

// identityTimeout bounds the sts:GetCallerIdentity call that names the
// caller in the audit log.
const identityTimeout = 10 * time.Second

// callerIdentity returns the ARN of the identity the AWS credentials
// belong to. It is a variable so that tests can stand in for STS, which the
// local stack lacks.
var callerIdentity = stsCallerIdentity

// stsCallerIdentity asks sts:GetCallerIdentity, with the SDK's standard
// configuration (and the command's --profile and --region), once.
func stsCallerIdentity(ctx context.Context, a *app) (string, error) {
	var opts []func(*config.LoadOptions) error
	if a.profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(a.profile))
	}
	if a.region != "" {
		opts = append(opts, config.WithRegion(a.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return "", fmt.Errorf("loading the AWS configuration: %w", err)
	}
	out, err := sts.NewFromConfig(cfg, func(o *sts.Options) { o.RetryMaxAttempts = 1 }).
		GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", err
	}
	if aws.ToString(out.Arn) == "" {
		return "", errors.New("sts:GetCallerIdentity returned no ARN")
	}
	return aws.ToString(out.Arn), nil
}

// auditFlags are the flags of the commands that change a queue.
type auditFlags struct {
	yes  bool
	file string
}

// add adds --audit and, when yes describes it, --yes.
func (f *auditFlags) add(cmd *cobra.Command, yes string) {
	if yes != "" {
		cmd.Flags().BoolVar(&f.yes, "yes", false, yes)
	}
	cmd.Flags().StringVar(&f.file, "audit", defaultAuditFile,
		`append one JSON line per action to this file, created readable by you only ("-": standard error)`)
}

func (f *auditFlags) validate() error {
	if f.file == "" {
		return usageError{errors.New(`--audit: empty file name (use "-" for standard error)`)}
	}
	return nil
}

// where names the audit log for people.
func (f *auditFlags) where() string {
	if f.file == "-" {
		return "standard error"
	}
	return f.file
}

// openAudit opens the audit log and finds out who the caller is: an
// unreachable STS leaves the caller "unknown", with a note in each record
// and a warning.
func (d *dlqCmd) openAudit(ctx context.Context, f auditFlags) (dlq.Audit, func(), error) {
	var log *dlq.AuditLog
	closeLog := func() {}
	if f.file == "-" {
		log = dlq.NewAuditLog(d.a.err)
	} else {
		l, err := dlq.OpenAuditLog(f.file)
		if err != nil {
			return dlq.Audit{}, nil, err
		}
		log, closeLog = l, func() {
			if err := l.Close(); err != nil {
				fmt.Fprintf(d.a.err, "warning: %v\n", err)
			}
		}
	}
	audit := dlq.Audit{Record: log.Record, Caller: dlq.UnknownCaller}
	ictx, cancel := context.WithTimeout(ctx, identityTimeout)
	defer cancel()
	id, err := callerIdentity(ictx, d.a)
	if err != nil {
		audit.CallerNote = "sts:GetCallerIdentity failed: " + oneLine(err.Error(), 300)
		fmt.Fprintf(d.a.err, "warning: the audit log records the caller as %q: %s\n", dlq.UnknownCaller, audit.CallerNote)
	} else {
		audit.Caller = id
	}
	return audit, closeLog, nil
}
