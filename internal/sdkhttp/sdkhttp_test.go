package sdkhttp_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// closingBody is a request body as the SDK makes it: once closed, reads
// give io.EOF.
type closingBody struct {
	mu     sync.Mutex
	r      io.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *closingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// lateReader is a transport whose write goroutine reads the body only
// after the response has gone back to the caller.
type lateReader struct{ sent *http.Request }

func (l *lateReader) Do(req *http.Request) (*http.Response, error) {
	l.sent = req
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// The body the transport reads is whole even when the caller closed its
// own once the response came back, as the SDK does.
func TestTransportReadsBodyAfterCallerClosedIt(t *testing.T) {
	for _, wrapped := range []bool{true, false} {
		body := &closingBody{r: strings.NewReader("Action=ReceiveMessage")}
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", body)
		req.ContentLength = int64(len("Action=ReceiveMessage"))
		l := &lateReader{}
		var c sdkhttp.Doer = l
		if wrapped {
			c = sdkhttp.Wrap(l)
		}
		if _, err := c.Do(req); err != nil {
			t.Fatal(err)
		}
		_ = req.Body.Close() // the SDK, once Do returns
		got, err := io.ReadAll(l.sent.Body)
		switch {
		case wrapped && (err != nil || string(got) != "Action=ReceiveMessage"):
			t.Errorf("wrapped: the transport read %q, %v; want the whole body", got, err)
		case !wrapped && len(got) != 0:
			t.Errorf("unwrapped: the transport read %q; this test no longer shows the closed body", got)
		}
		if wrapped {
			again, err := l.sent.GetBody()
			if b, _ := io.ReadAll(again); err != nil || string(b) != "Action=ReceiveMessage" {
				t.Errorf("GetBody gave %q, %v", b, err)
			}
			if l.sent.ContentLength != req.ContentLength {
				t.Errorf("ContentLength %d, want %d", l.sent.ContentLength, req.ContentLength)
			}
		}
	}
}

// A body that is not as long as its ContentLength says is refused before
// anything is sent, as net/http would refuse it.
func TestBodyLengthMismatch(t *testing.T) {
	for name, n := range map[string]int64{"shorter": 30, "longer": 3} {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", io.NopCloser(strings.NewReader("0123456789")))
		req.ContentLength = n
		l := &lateReader{}
		_, err := sdkhttp.Wrap(l).Do(req)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("ContentLength %d", n)) || l.sent != nil {
			t.Errorf("%s: err = %v, sent = %v; want an error naming the length, nothing sent", name, err, l.sent != nil)
		}
	}
}

// A request without a body, and one of unknown length, go through as they
// are, the latter with its length found.
func TestNoBodyAndUnknownLength(t *testing.T) {
	l := &lateReader{}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	if _, err := sdkhttp.Wrap(l).Do(req); err != nil || l.sent != req {
		t.Errorf("no body: err %v, request replaced %v", err, l.sent != req)
	}
	req, _ = http.NewRequest(http.MethodPost, "http://127.0.0.1/", io.NopCloser(strings.NewReader("abc")))
	req.ContentLength = -1
	if _, err := sdkhttp.Wrap(l).Do(req); err != nil || l.sent.ContentLength != 3 {
		t.Errorf("unknown length: err %v, ContentLength %d", err, l.sent.ContentLength)
	}
	if w := sdkhttp.Wrap(l); sdkhttp.Wrap(w) != w {
		t.Error("Wrap of a *Client wraps it again")
	}
}

// earlyServer answers a SendMessage before it reads the request's body:
// it sends the response's first half, reads the body, waits, and sends
// the second half. It counts the requests it gets.
func earlyServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var requests atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		// The body the SDK sends is JSON: {"MessageBody":"xxxx…","QueueUrl":…}.
		// The response's MD5 must be the message body's; every test sends
		// the same body, bigBody.
		resp := fmt.Sprintf(`{"MD5OfMessageBody":%q,"MessageId":"m-1"%s}`, bigBodyMD5, strings.Repeat(" ", 256<<10))
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("Content-Length", fmt.Sprint(len(resp)))
		half := len(resp) / 2
		_, _ = io.WriteString(w, resp[:half])
		w.(http.Flusher).Flush()
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(200 * time.Millisecond) // the client's write goroutine meets the closed body meanwhile
		_, _ = io.WriteString(w, resp[half:])
	}))
	t.Cleanup(s.Close)
	return s, &requests
}

// bigBody is larger than the loopback socket's buffers, so that the
// client's write goroutine is still sending it when the response comes;
// bigBodyMD5 is its MD5, which the SDK checks. Made by the test that uses
// them, not for every test of the package.
var bigBody, bigBodyMD5 string

func sqsClient(url string, wrap bool) *sqs.Client {
	return sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: aws.AnonymousCredentials{},
		HTTPClient: func() aws.HTTPClient {
			c := awshttp.NewBuildableClient()
			if wrap {
				return sdkhttp.Wrap(c)
			}
			return c
		}(),
	})
}

// With the SDK's own HTTP client, a reply that comes back while the
// request's body is still being sent makes the SDK send the applied
// request again; through Wrap it is sent once.
func TestAnsweredRequestIsNotSentAgain(t *testing.T) {
	bigBody = strings.Repeat("x", 32<<20)
	h := md5.Sum([]byte(bigBody))
	bigBodyMD5 = hex.EncodeToString(h[:])
	for _, wrap := range []bool{false, true} {
		s, requests := earlyServer(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := sqsClient(s.URL, wrap).SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(s.URL + "/000000000000/q"), MessageBody: aws.String(bigBody)})
		cancel()
		n := requests.Load()
		switch {
		case wrap && (err != nil || n != 1):
			t.Errorf("wrapped: %d requests, err %v; want 1, nil", n, err)
		case !wrap && n == 1:
			// The SDK no longer reads a closed body: Wrap may be unneeded.
			t.Errorf("unwrapped: 1 request, err %v; want the request sent again, as this test was written to show", err)
		}
	}
}
