package dlq

import (
	"context"
	"errors"
	"strings"
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

// A destination that is itself a dead-letter queue (billing-dlq given for
// billing) is refused, naming its source queue: messages sent there would
// not run, and a replay from it would find their metadata unverified.
// Where the dead-letter queues cannot be known, or with Force, it is taken.
func TestDestinationIsADeadLetterQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		api    func(e *fakeEnv) API
		refuse bool
	}{
		{"sources unknown", func(e *fakeEnv) API { return e.f }, false},
		{"sources listed", func(e *fakeEnv) API { return &listing{Fake: e.f, urls: e.urls()} }, true},
		{"sources found", func(e *fakeEnv) API { return &listing{Fake: e.f, urls: e.urls(), unsupported: true} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv()
			e.deadLetterJobs(2)
			q := openOrdersDLQ(t, tc.api(e))
			_, err := q.Target(ctx, "billing-dlq")
			if tc.refuse != errors.Is(err, ErrDeadLetterDestination) ||
				(tc.refuse && !strings.Contains(err.Error(), "destination billing-dlq is a dead-letter queue (billing sends its dead letters there): messages sent to it would not run; give its source queue, billing, instead")) {
				t.Fatalf("Target: %v", err)
			}
			res, err := q.Replay(ctx, ReplayConfig{To: "billing-dlq"})
			if tc.refuse {
				if !errors.Is(err, ErrDeadLetterDestination) || res != nil {
					t.Errorf("replay: %v, %+v", err, res)
				}
				e.wantDLQDepth(t, "after the refused replay", 2, 0)
				if _, err := q.PlanRedrive(ctx, RedriveConfig{To: "billing-dlq"}); !errors.Is(err, ErrDeadLetterDestination) {
					t.Errorf("redrive: %v", err)
				}
			} else if err != nil || res.Moved != 2 {
				t.Errorf("replay: %v, %+v", err, res)
			}
			forced, err := Open(ctx, tc.api(e), "orders-dlq", Config{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := forced.Target(ctx, "billing-dlq"); err != nil {
				t.Errorf("with Force: %v", err)
			}
		})
	}
}

// A queue URL with a trailing slash is the queue: Open and Target name it.
func TestQueueURLWithTrailingSlash(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	q, err := Open(context.Background(), e.f, e.ordersDLQ+"/", Config{})
	if err != nil || q.Name != "orders-dlq" || q.URL != e.ordersDLQ {
		t.Fatalf("Open: %v, %+v", err, q)
	}
	if to, err := q.Target(context.Background(), e.orders+"/"); err != nil || to.Name != "orders" {
		t.Errorf("Target: %v, %+v", err, to)
	}
}
