package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"
)

// WorkerPackage is the import path of the worker process under test.
const WorkerPackage = "github.com/sqsworker/sqsworker/internal/cmd/chaosworker"

// env is what every scenario shares: the services' endpoints, the runner's
// own clients (straight to the services, never through a proxy), and the
// worker binary.
type env struct {
	sqsEndpoint, ddbEndpoint *url.URL
	sqs                      *sqs.Client
	ddb                      *dynamodb.Client
	log                      *slog.Logger
	workerBin                string
	workerArgs               []string
	logDir                   string
	full                     bool
}

// Endpoints returns the SQS and DynamoDB endpoints the SDK will use from the
// environment (AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_DYNAMODB, else
// AWS_ENDPOINT_URL), "" when unset.
func Endpoints() (sqsURL, ddbURL string) {
	get := func(name string) string {
		if e := os.Getenv(name); e != "" {
			return e
		}
		return os.Getenv("AWS_ENDPOINT_URL")
	}
	return get("AWS_ENDPOINT_URL_SQS"), get("AWS_ENDPOINT_URL_DYNAMODB")
}

// loopbackURL parses an endpoint and checks that it is on this machine.
func loopbackURL(name, endpoint string) (*url.URL, error) {
	if endpoint == "" {
		return nil, fmt.Errorf("chaos: %s is not set: run against the local stack (eval \"$(localstack/stack.sh env)\")", name)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("chaos: %s %q: %w", name, endpoint, err)
	}
	if u.Scheme != "http" || u.Port() == "" {
		return nil, fmt.Errorf("chaos: %s %q: want http://host:port", name, endpoint)
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("chaos: %s %q is not on the loopback interface: the chaos runner only talks to a local stack", name, endpoint)
	}
	return u, nil
}

func newEnv(ctx context.Context, log *slog.Logger) (*env, error) {
	sqsE, ddbE := Endpoints()
	su, err := loopbackURL("AWS_ENDPOINT_URL_SQS", sqsE)
	if err != nil {
		return nil, err
	}
	du, err := loopbackURL("AWS_ENDPOINT_URL_DYNAMODB", ddbE)
	if err != nil {
		return nil, err
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: loading the AWS config: %w", err)
	}
	// The SDK's own warnings (a connection the emulator closed while a
	// response was being discarded) are the runner's debug records.
	cfg.Logger = logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		log.Debug(fmt.Sprintf(format, v...), "source", "aws-sdk", "classification", string(c))
	})
	return &env{
		sqsEndpoint: su,
		ddbEndpoint: du,
		sqs:         sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(su.String()) }),
		// DynamoDB Local's error replies carry no checksum; the endpoint
		// is local.
		ddb: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(du.String())
			o.DisableValidateResponseChecksum = true
		}),
		log: log,
	}, nil
}

// buildWorker builds the chaosworker into a temporary directory, which
// cleanup removes.
func buildWorker(ctx context.Context) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "chaosworker-")
	if err != nil {
		return "", nil, fmt.Errorf("chaos: building the worker: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "chaosworker")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, WorkerPackage)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("chaos: go build %s: %w\n%s", WorkerPackage, err, out.String())
	}
	return bin, cleanup, nil
}

// workerEnv is the environment of a worker process: the runner's, with the
// endpoints replaced by the proxies'.
func workerEnv(sqsProxy, ddbProxy string, extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_ENDPOINT_URL") || strings.HasPrefix(kv, "CHAOSWORKER_") {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "AWS_ENDPOINT_URL_SQS="+sqsProxy, "AWS_ENDPOINT_URL_DYNAMODB="+ddbProxy)
	return append(out, extra...)
}
