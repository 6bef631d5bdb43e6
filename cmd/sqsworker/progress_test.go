package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestProgress(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	p := newProgress(&out, "sent", "messages", clock.now)
	p.SetTotal(10000)
	p.Add(10)
	if out.Len() != 0 {
		t.Fatalf("drawn at once: %q", out.String())
	}
	clock.advance(2 * time.Second)
	p.Add(990)
	if want := "\r\x1b[Ksent 1,000 messages, 500/s, 10%, about 18s left"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	clock.advance(100 * time.Millisecond)
	p.Add(100)
	if out.Len() != 0 {
		t.Errorf("redrawn within %s: %q", progressEvery, out.String())
	}
	clock.advance(progressEvery)
	p.Add(0)
	if !strings.HasSuffix(out.String(), "sent 1,100 messages, 478/s, 11%, about 19s left") {
		t.Errorf("got %q", out.String())
	}
	out.Reset()
	p.Finish()
	if out.String() != "\r\x1b[K" {
		t.Errorf("Finish wrote %q", out.String())
	}
	out.Reset()
	p.Finish()
	if out.Len() != 0 {
		t.Errorf("a second Finish wrote %q", out.String())
	}
}

// Without a total, the position in the input gives the share done.
func TestProgressPosition(t *testing.T) {
	var out bytes.Buffer
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	p := newProgress(&out, "sent", "lines", clock.now)
	clock.advance(time.Minute)
	p.SetPosition(250, 1000)
	p.Add(3000)
	if want := "\r\x1b[Ksent 3,000 lines, 50/s, 25%, about 3m00s left"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	p2 := newProgress(&out, "read", "queues", clock.now)
	clock.advance(time.Hour)
	p2.Add(7)
	if want := "\r\x1b[Kread 7 queues, 0/s"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

// A nil progress, as app.progress returns off a terminal, does nothing.
func TestProgressNil(t *testing.T) {
	var p *progress
	p.SetTotal(1)
	p.SetPosition(1, 2)
	p.Add(1)
	p.Clear()
	p.Finish()
	a := &app{err: &bytes.Buffer{}}
	if a.progress("sent", "messages") != nil {
		t.Error("progress on a stderr that is not a terminal")
	}
}

func TestGroupDigitsAndShortDuration(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 10000: "10,000"} {
		if got := groupDigits(n); got != want {
			t.Errorf("groupDigits(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{4 * time.Second: "4s", 125 * time.Second: "2m05s", 62 * time.Minute: "1h02m", 1400 * time.Millisecond: "1s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
