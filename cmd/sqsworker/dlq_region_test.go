package main

import (
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// `dlq purge` given the ARN of a dead-letter queue in another region than
// the client's, on the local SQS: refused, naming the region to give,
// nothing purged. GetQueueUrl finds a queue by its name in the client's
// region: the queue of the same name there was purged.
func TestDlqPurgeRefusesAnARNOfAnotherRegion(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.DLQURL, "", "a", "b")
	waitVisible(t, c, q.DLQURL, 2)
	parts := strings.Split(q.DLQARN, ":")
	parts[3] = map[bool]string{true: "eu-west-1", false: "us-east-1"}[parts[3] != "eu-west-1"]
	other := strings.Join(parts, ":")
	_, stderr, code := runCLI(t, "", "dlq", "purge", other, "--yes")
	if code != 1 || !strings.Contains(stderr, "--region "+parts[3]) {
		t.Errorf("purge of %s: exit %d\n%s\nwant 1, naming the region", other, code, stderr)
	}
	waitVisible(t, c, q.DLQURL, 2)
}
