package dlq

import (
	"context"
	"errors"
	"testing"
)

// A source queue opened as a dead-letter queue is refused with the name of
// its own dead-letter queue, the queue most likely meant; a queue that
// names none has none in its error.
func TestOpenNamesTheSourcesDLQ(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	var nd *NotDeadLetterError
	if _, err := Open(context.Background(), e.f, "orders", Config{}); !errors.As(err, &nd) || nd.DeadLetterQueue != "orders-dlq" {
		t.Errorf("orders: %v, %+v", err, nd)
	}
	nd = nil
	if _, err := Open(context.Background(), &listing{Fake: e.f, urls: e.urls()}, "lonely", Config{}); !errors.As(err, &nd) || nd.DeadLetterQueue != "" {
		t.Errorf("lonely: %v, %+v", err, nd)
	}
}
