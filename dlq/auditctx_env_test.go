package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// On the emulator: a replay interrupted while its first copy is sent moves
// that message and records the move, with an Audit.Record that honours its
// context; the other message stays.
func TestReplayInterruptedMidSendRecordsMoveOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	sendDeadLetters(t, c, q.DLQURL, q.URL, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dq, err := Open(context.Background(), &cancelOnSend{API: c, cancel: cancel}, q.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	started, moved := map[string]bool{}, map[string]bool{}
	res, err := dq.Replay(ctx, ReplayConfig{Visibility: 5 * time.Second, Audit: Audit{Record: func(ctx context.Context, r AuditRecord) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch r.Action {
		case ActionReplayStart:
			started[r.DLQMessageID] = true
		case ActionReplay:
			moved[r.DLQMessageID] = true
		}
		return nil
	}}})
	if res == nil || res.Moved != 1 || !res.Interrupted {
		t.Fatalf("replay: %v, %+v; want one moved, then interrupted", err, res)
	}
	if len(started) != 1 || len(moved) != 1 || !moved[res.Messages[0].MessageID] {
		t.Errorf("records: started %v, moved %v; want the moved message's replay-start and replay", started, moved)
	}
	if v, f, _ := localtest.Depth(t, c, q.DLQURL); v+f != 1 {
		t.Errorf("the dead-letter queue holds %d messages, want the other", v+f)
	}
}
