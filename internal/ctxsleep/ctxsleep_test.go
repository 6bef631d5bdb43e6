package ctxsleep

import (
	"context"
	"testing"
	"time"
)

func TestSleepFull(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep with a live context reported an early return")
	}
}

func TestSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep with a done context reported a full wait")
	}
}

func TestSleepCancelledWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	if <-done {
		t.Fatal("Sleep cancelled mid-wait reported a full wait")
	}
}
