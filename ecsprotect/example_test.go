package ecsprotect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/ecsprotect"
)

// A job that runs for longer than After protects the task until it ends.
// At the start, the Protector removes a protection an earlier process of
// the task may have left.
// Here a stand-in for the ECS agent prints what it is asked; in a task,
// AgentURI is left empty ($ECS_AGENT_URI), and the middleware goes on the
// worker's handler: w.Run(ctx, sqsworker.Chain(h, p.Middleware())).
func Example() {
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s struct {
			ProtectionEnabled bool
			ExpiresInMinutes  int
		}
		_ = json.NewDecoder(r.Body).Decode(&s)
		fmt.Printf("agent: protected %v for %d minutes\n", s.ProtectionEnabled, s.ExpiresInMinutes)
		_ = json.NewEncoder(w).Encode(map[string]any{"protection": map[string]any{"ProtectionEnabled": s.ProtectionEnabled}})
	}))
	defer agent.Close()

	p, err := ecsprotect.New(ecsprotect.Config{AgentURI: agent.URL, After: 100 * time.Millisecond, Interval: 20 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		time.Sleep(time.Second) // a long job
		return nil
	}), p.Middleware())
	_ = h.HandleMessage(context.Background(), &sqsworker.Message{ID: "1"})
	time.Sleep(100 * time.Millisecond)
	stop()
	<-done
	// Output:
	// agent: protected false for 0 minutes
	// agent: protected true for 60 minutes
	// agent: protected false for 0 minutes
}
