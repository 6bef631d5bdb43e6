// Package sdkhttp keeps a request's body for the HTTP transport alone.
//
// The AWS SDK for Go v2 closes a request's body as soon as the HTTP client
// returns the response; reads of a closed body give io.EOF. net/http sends
// a body it does not know to be in memory after the headers, from its
// connection's write goroutine, and reads it once more after the last byte
// to check its length. When the reply comes back before that goroutine has
// made its last read (an answer that is quick, a goroutine that is late: a
// loaded or CPU-throttled host), the read meets the closed body, the
// transport takes the io.EOF for a write error and closes the connection,
// and a response body still being read fails with "use of closed network
// connection". The SDK then retries a request that was applied: a receive
// whose messages SQS already handed out (they stay hidden for a visibility
// timeout, one receive nearer the dead-letter queue), a send (a second
// copy). The larger the reply, the likelier: a receive of large messages.
//
// Client gives the transport its own copy of each body, in memory, so that
// nothing the SDK closes is read after it. ForSQS makes every call of an
// *sqs.Client go through one, with room in the SDK's default connection
// pool for the calls a worker has under way. The other components given a
// client (the producer, the dead-letter queue tools, the batch coordinator,
// the idempotency store, the visibility extender) give each of its calls the option SQSOptions
// returns, or that of package dynamohttp for DynamoDB (both CallOptions),
// made once when they are built.
package sdkhttp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// Doer is the SDK's HTTP client interface (aws.HTTPClient).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Client sends requests through Next with their bodies read into memory
// first: for the small bodies of SQS, DynamoDB and STS calls, not for
// streams. It sets GetBody, so that net/http may send again, on a new
// connection, a request of which it wrote nothing. It is safe for
// concurrent use when Next is.
type Client struct {
	Next Doer
}

// Wrap returns c as a *Client, or c itself when it already is one.
func Wrap(c Doer) *Client {
	if w, ok := c.(*Client); ok {
		return w
	}
	return &Client{Next: c}
}

// Do reads req's body into memory, closes it, and sends req with the copy.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.Next.Do(req)
	}
	b, err := readBody(req.Body, req.ContentLength)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	r := *req // the caller's request is left as it was
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return c.Next.Do(&r)
}

// readBody reads a body of n bytes (n <= 0: unknown) to its end.
func readBody(body io.Reader, n int64) ([]byte, error) {
	if n <= 0 {
		return io.ReadAll(body)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, fmt.Errorf("shorter than its ContentLength %d: %w", n, err)
	}
	var more [1]byte
	if k, _ := io.ReadFull(body, more[:]); k > 0 {
		return nil, fmt.Errorf("longer than its ContentLength %d", n)
	}
	return b, nil
}
