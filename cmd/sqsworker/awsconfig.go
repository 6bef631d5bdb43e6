package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// credentialsTimeout bounds the first retrieval of credentials: on a
// machine without any, the SDK ends by asking the EC2 instance metadata
// service, which may not answer at all.
const credentialsTimeout = 15 * time.Second

// localStackHint is how to point sqsworker at this repository's local stack.
const localStackHint = `for the local stack: eval "$(localstack/stack.sh env)"`

// awsTarget is where the SQS client sends its requests, for messages.
type awsTarget struct {
	region   string
	endpoint string // "" when it could not be resolved
}

// loadAWSConfig loads the SDK's default configuration, with the SDK's own
// log lines routed through sdkLogger, and checks that it names a region and
// finds credentials.
func (a *app) loadAWSConfig(ctx context.Context) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{config.WithLogger(&sdkLogger{w: a.errs})}
	if a.profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(a.profile))
	}
	if a.region != "" {
		opts = append(opts, config.WithRegion(a.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		var missing config.SharedConfigProfileNotExistError
		if errors.As(err, &missing) {
			return cfg, fmt.Errorf("AWS profile %q is not in the shared config files (~/.aws/config, ~/.aws/credentials): list them with `aws configure list-profiles`: %w", missing.Profile, err)
		}
		return cfg, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	// Every request's body from its own copy (see package sdkhttp), through
	// the HTTP client each client makes for itself: wrapping cfg.HTTPClient
	// instead would hide it from the clients, which then skip the timeouts
	// of the defaults mode (AWS_DEFAULTS_MODE).
	cfg.ServiceOptions = append(cfg.ServiceOptions, copyBodies)
	if cfg.Region == "" {
		return cfg, errors.New("no AWS region: pass --region, set AWS_REGION (export AWS_REGION=eu-west-1), or set region in your profile (~/.aws/config); " + localStackHint)
	}
	if cfg.Credentials == nil {
		return cfg, errors.New("no AWS credentials provider: " + credentialsHint)
	}
	cctx, cancel := context.WithTimeout(ctx, credentialsTimeout)
	defer cancel()
	if _, err := cfg.Credentials.Retrieve(cctx); err != nil {
		if ctx.Err() != nil {
			return cfg, ctx.Err()
		}
		return cfg, fmt.Errorf("no AWS credentials found: %s (the SDK said: %w)", credentialsHint, err)
	}
	return cfg, nil
}

// copyBodies is an aws.Config service option: the client's HTTP client,
// once the client has set it up, sends each request's body from a copy.
func copyBodies(_ string, options any) {
	switch o := options.(type) {
	case *sqs.Options:
		if o.HTTPClient != nil {
			o.HTTPClient = sdkhttp.Wrap(o.HTTPClient)
		}
	case *dynamodb.Options:
		if o.HTTPClient != nil {
			o.HTTPClient = sdkhttp.Wrap(o.HTTPClient)
		}
	}
}

const credentialsHint = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or choose a profile with --profile or AWS_PROFILE (set up with `aws configure` or `aws sso login`), or run with an IAM role; " + localStackHint

// sqsTarget returns the region and endpoint of an SQS client.
func sqsTarget(ctx context.Context, c *sqs.Client, region string) awsTarget {
	t := awsTarget{region: region}
	if e := aws.ToString(c.Options().BaseEndpoint); e != "" {
		t.endpoint = e
		return t
	}
	ep, err := sqs.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, sqs.EndpointParameters{Region: aws.String(region)})
	if err == nil {
		t.endpoint = ep.URI.String()
	}
	return t
}

// where says where requests go: "in eu-west-1 at https://...".
func (t awsTarget) where() string {
	if t.region == "" {
		return ""
	}
	s := " in " + t.region
	if t.endpoint != "" {
		s += " at " + t.endpoint
	}
	return s
}

// queueError is err, made clear when it says the queue does not exist.
func queueError(nameOrURL string, err error) error {
	return (*app)(nil).queueError(nameOrURL, err)
}

// queueError is err, made clear: a missing queue named with the region and
// endpoint asked, and how to fix it; an endpoint that cannot be reached.
// a may be nil.
func (a *app) queueError(nameOrURL string, err error) error {
	var t awsTarget
	if a != nil {
		t = a.aws
	}
	if isQueueMissing(err) {
		return &queueMissingError{queue: nameOrURL, target: t, err: err}
	}
	prefix := "queue " + nameOrURL + ": "
	if strings.HasPrefix(err.Error(), "queue ") {
		prefix = ""
	}
	if hint := unreachableHint(err, t); hint != "" {
		return fmt.Errorf("%s%s: %w", prefix, hint, err)
	}
	return fmt.Errorf("%s%w", prefix, err)
}

// isQueueMissing reports whether err says the queue does not exist.
func isQueueMissing(err error) bool {
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		c := api.ErrorCode()
		return c == "AWS.SimpleQueueService.NonExistentQueue" || c == "QueueDoesNotExist"
	}
	return false
}

// unreachableHint explains an error that says the endpoint cannot be
// reached, or "".
func unreachableHint(err error, t awsTarget) string {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound && t.endpoint != "" && strings.Contains(t.endpoint, ".amazonaws.com"):
		return fmt.Sprintf("no SQS endpoint %s: is %q a region? (check --region or AWS_REGION)", t.endpoint, t.region)
	case errors.As(err, &dns):
		return fmt.Sprintf("cannot resolve the SQS endpoint's host %s", dns.Name)
	case errors.Is(err, syscall.ECONNREFUSED) && t.endpoint != "":
		if u, err := url.Parse(t.endpoint); err == nil {
			if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || ip != nil && ip.IsLoopback() {
				return fmt.Sprintf("nothing answers at %s (is the local stack running? localstack/stack.sh start)", t.endpoint)
			}
		}
		return "nothing answers at " + t.endpoint
	}
	return ""
}

// queueMissingError says that a queue does not exist, more briefly than the
// SDK's error it wraps, with where it was looked for and how to go on.
type queueMissingError struct {
	queue  string
	target awsTarget
	err    error
}

// awsRegionInURL matches the region of an SQS queue URL on AWS.
var awsRegionInURL = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com`)

func (e *queueMissingError) Error() string {
	s := "queue " + e.queue + " does not exist" + e.target.where()
	if e.target.region == "" {
		return s
	}
	if u, err := url.Parse(e.queue); err == nil && u.Host != "" {
		if m := awsRegionInURL.FindStringSubmatch(u.Host); m != nil && m[1] != e.target.region {
			return s + fmt.Sprintf(": the URL is in %s; use --region %s", m[1], m[1])
		}
		return s + ": check the URL and the region (--region or AWS_REGION)"
	}
	name := e.queue
	if arn, err := dlq.ParseARN(e.queue); err == nil {
		name = arn.Name // queue create takes a name
	}
	return s + fmt.Sprintf(": check the name and the region (--region or AWS_REGION), or create it: sqsworker queue create %s", name)
}

func (e *queueMissingError) Unwrap() error { return e.err }

// sdkLogger receives the AWS SDK's own log lines. Those that only say what
// the CLI explains better, or that do not matter to its user, are dropped;
// the others are printed as notes.
type sdkLogger struct{ w io.Writer }

// sdkQuiet are the SDK's log lines the CLI drops, by their start.
var sdkQuiet = []string{
	// The instance metadata service answered no token (not on EC2, or a
	// container without a hop limit): the SDK tries IMDSv1. When no
	// credentials come of it, the CLI says how to provide them.
	"falling back to IMDSv1",
	// A request cut short (an interrupt, a shutdown, a long poll's
	// context) left a response body unread: only connection reuse is
	// affected.
	"failed to discard remaining HTTP response body",
	"failed to close HTTP response body",
	// Local emulators answer without the checksums AWS sends.
	"Response has no supported checksum",
}

func (l *sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	for _, q := range sdkQuiet {
		if strings.HasPrefix(msg, q) {
			return
		}
	}
	fmt.Fprintf(l.w, "sqsworker: AWS SDK %s: %s\n", strings.ToLower(string(c)), msg)
}
