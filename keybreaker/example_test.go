package keybreaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/keybreaker"
)

// Webhook delivery: each message names its endpoint in the "endpoint"
// attribute. An endpoint that fails three times in a row is left alone for
// a minute, while the other endpoints' jobs go on.
func Example() {
	kb, err := keybreaker.New(keybreaker.Config{
		Key: func(m *sqsworker.Message) string {
			endpoint, _ := m.Attribute("endpoint")
			return endpoint
		},
		Failures: 3,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	deliver := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if endpoint, _ := m.Attribute("endpoint"); endpoint == "https://down.example.com/hook" {
			// PartlyUnavailable: the endpoint is down, not the job at
			// fault, and the other endpoints' jobs should go on.
			return sqsworker.PartlyUnavailable(errors.New("POST: 503 Service Unavailable"))
		}
		return nil
	})
	h := kb.Middleware(deliver)

	job := func(endpoint string) *sqsworker.Message {
		return &sqsworker.Message{MessageAttributes: map[string]sqsworker.MessageAttribute{
			"endpoint": {DataType: "String", StringValue: endpoint},
		}}
	}
	for range 4 {
		err := h.HandleMessage(context.Background(), job("https://down.example.com/hook"))
		fmt.Printf("down: postponed %v\n", sqsworker.IsPostponed(err))
	}
	fmt.Println("up:", h.HandleMessage(context.Background(), job("https://up.example.com/hook")))
	s := kb.Stats()
	fmt.Printf("open keys %d, opens %d, jobs skipped %d\n", s.Open, s.Opens, s.Skipped)
	// Output:
	// down: postponed false
	// down: postponed false
	// down: postponed false
	// down: postponed true
	// up: <nil>
	// open keys 1, opens 1, jobs skipped 1
}
