// Package queue reads what the runtimes need to know about a queue — its
// visibility timeout, FIFO-ness and redrive policy — and moves failed messages
// to its dead-letter queue with failure metadata.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/internal/awserr"
)

// API is the part of the SQS client Load calls.
type API interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Info describes a queue.
type Info struct {
	// URL is the queue's URL, as given to Load.
	URL string
	// ARN is the queue's ARN (QueueArn).
	ARN string
	// FIFO is true for a FIFO queue.
	FIFO bool
	// VisibilityTimeout is the queue's default visibility timeout.
	VisibilityTimeout time.Duration
	// MaxReceiveCount is the redrive policy's maxReceiveCount; 0 when the
	// queue has no redrive policy.
	MaxReceiveCount int
	// Retention is the queue's MessageRetentionPeriod: how long after its
	// send SQS deletes a message, received or not; 0 when not read.
	Retention time.Duration
	// DeadLetterARN and DeadLetterURL name the redrive policy's target.
	DeadLetterARN string
	DeadLetterURL string
}

// IsFIFOURL reports whether a queue URL names a FIFO queue.
func IsFIFOURL(url string) bool { return strings.HasSuffix(url, ".fifo") }

// Load reads the attributes of the queue at url and resolves the URL of its
// dead-letter queue.
func Load(ctx context.Context, api API, url string) (Info, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameQueueArn,
			types.QueueAttributeNameVisibilityTimeout,
			types.QueueAttributeNameRedrivePolicy,
			types.QueueAttributeNameFifoQueue,
			types.QueueAttributeNameMessageRetentionPeriod,
		},
	})
	if err != nil {
		return Info{}, fmt.Errorf("reading attributes of queue %s: %w", url, err)
	}
	a := out.Attributes
	info := Info{URL: url, ARN: a["QueueArn"], FIFO: a["FifoQueue"] == "true" || IsFIFOURL(url)}
	if v, ok := a["VisibilityTimeout"]; ok {
		secs, err := strconv.Atoi(v)
		if err != nil {
			return Info{}, fmt.Errorf("queue %s: %w: malformed VisibilityTimeout %q", url, ErrInvalid, v)
		}
		info.VisibilityTimeout = time.Duration(secs) * time.Second
	}
	if secs, err := strconv.Atoi(a["MessageRetentionPeriod"]); err == nil && secs > 0 {
		info.Retention = time.Duration(secs) * time.Second
	}
	if rp := a["RedrivePolicy"]; rp != "" {
		arn, maxReceive, err := ParseRedrivePolicy(rp)
		if err != nil {
			return Info{}, fmt.Errorf("queue %s: %w: %w", url, ErrInvalid, err)
		}
		info.DeadLetterARN, info.MaxReceiveCount = arn, maxReceive
		name, account, err := ParseARN(arn)
		if err != nil {
			return Info{}, fmt.Errorf("queue %s: %w: redrive policy: %w", url, ErrInvalid, err)
		}
		u, err := api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name, QueueOwnerAWSAccountId: &account})
		if err != nil {
			// Refused to a role without sqs:GetQueueUrl (AWS's managed
			// policy for Lambda's SQS consumers has none): a redrive
			// policy's target is in the queue's own region, so its URL is
			// the queue's, with the target's account and name. Any other
			// error (the dead-letter queue deleted, throttling) stands.
			derived, ok := siblingURL(url, account, name)
			if !ok || !awserr.IsAccessDenied(err) {
				return Info{}, fmt.Errorf("queue %s: resolving dead-letter queue %s: %w", url, arn, err)
			}
			info.DeadLetterURL = derived
			return info, nil
		}
		info.DeadLetterURL = aws.ToString(u.QueueUrl)
	}
	return info, nil
}

// siblingURL returns the URL of the queue name of account on the endpoint
// of the queue at queueURL (scheme, host and port: its region's), and
// whether queueURL has the form SCHEME://HOST/ACCOUNT/NAME.
func siblingURL(queueURL, account, name string) (string, bool) {
	u, err := neturl.Parse(queueURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", false
	}
	if parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/"); len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", false
	}
	return (&neturl.URL{Scheme: u.Scheme, Host: u.Host, Path: "/" + account + "/" + name}).String(), true
}

// ParseRedrivePolicy reads a queue's RedrivePolicy attribute.
func ParseRedrivePolicy(s string) (deadLetterARN string, maxReceiveCount int, err error) {
	var p struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return "", 0, fmt.Errorf("malformed redrive policy %q: %w", s, err)
	}
	// SQS writes maxReceiveCount as a number or as a string.
	n, convErr := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
	switch {
	case p.DeadLetterTargetArn == "":
		return "", 0, fmt.Errorf("malformed redrive policy %q: no deadLetterTargetArn", s)
	case convErr != nil || n < 1:
		return "", 0, fmt.Errorf("malformed redrive policy %q: maxReceiveCount must be a whole number of at least 1", s)
	}
	return p.DeadLetterTargetArn, n, nil
}

// URLGetter is the call URLOf makes.
type URLGetter interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// URLOf returns the URL of the queue given by its name, URL or ARN: a URL
// as it is, without the trailing slash a console's copy may have; a name,
// or an ARN's name and account, by GetQueueUrl, which finds the queue in
// the client's region (an ARN's region is the caller's to check).
func URLOf(ctx context.Context, api URLGetter, nameOrURL string, opts ...func(*sqs.Options)) (string, error) {
	if strings.HasPrefix(nameOrURL, "https://") || strings.HasPrefix(nameOrURL, "http://") {
		return strings.TrimRight(nameOrURL, "/"), nil
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(nameOrURL)}
	if strings.HasPrefix(nameOrURL, "arn:") {
		name, account, err := ParseARN(nameOrURL)
		if err != nil {
			return "", err
		}
		in = &sqs.GetQueueUrlInput{QueueName: aws.String(name), QueueOwnerAWSAccountId: aws.String(account)}
	}
	out, err := api.GetQueueUrl(ctx, in, opts...)
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

// ParseARN returns the queue name and account of an SQS queue ARN
// (arn:PARTITION:sqs:REGION:ACCOUNT:NAME).
func ParseARN(arn string) (name, account string, err error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || !regionRE.MatchString(parts[3]) || parts[4] == "" || parts[5] == "" {
		return "", "", fmt.Errorf("malformed SQS queue ARN %q: want arn:PARTITION:sqs:REGION:ACCOUNT:NAME", arn)
	}
	return parts[5], parts[4], nil
}

// regionRE matches a region's name: us-east-1, eu-central-2,
// us-gov-west-1.
var regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

// ErrInvalid marks errors in a queue's attributes, such as a malformed
// redrive policy: no retry will fix them.
var ErrInvalid = errors.New("invalid queue attributes")

// ErrNoDeadLetterQueue is returned by Mover.Move when the queue has no
// dead-letter queue.
var ErrNoDeadLetterQueue = errors.New("queue has no dead-letter queue")
