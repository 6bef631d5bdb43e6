package stopby

import (
	"context"
	"testing"
	"time"
)

func TestWithFrom(t *testing.T) {
	if _, ok := From(context.Background()); ok {
		t.Error("a context without a stop time has one")
	}
	at := time.Now().Add(time.Second)
	ctx, cancel := context.WithTimeout(With(context.Background(), at), time.Minute)
	defer cancel()
	if got, ok := From(ctx); !ok || !got.Equal(at) {
		t.Errorf("From = %v, %v, want %v", got, ok, at)
	}
}
