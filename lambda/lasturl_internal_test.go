package lambda

import "testing"

// The default ARN mapping keeps its last answer, and answers every ARN as
// QueueURLFromARN does, whatever the order.
func TestLastURLAnswersAsQueueURLFromARN(t *testing.T) {
	var c lastURL
	arns := []string{
		"arn:aws:sqs:eu-west-1:123456789012:orders",
		"arn:aws:sqs:eu-west-1:123456789012:orders",
		"arn:aws:sqs:us-east-1:123456789012:orders",
		"not an arn",
		"arn:aws:sqs:eu-west-1:123456789012:orders",
		"arn:aws-cn:sqs:cn-north-1:123456789012:jobs.fifo",
		"arn:aws:sqs:eu-west-1:123456789012:orders",
	}
	for _, arn := range arns {
		got, gerr := c.fromARN(arn)
		want, werr := QueueURLFromARN(arn)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Errorf("fromARN(%q) = %q, %v; QueueURLFromARN: %q, %v", arn, got, gerr, want, werr)
		}
	}
}
