package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// progressEvery is how often a progress line is redrawn at most.
const progressEvery = 200 * time.Millisecond

// progress shows how far a long operation has gone on one line of a
// terminal, redrawn in place: a count, a rate and, when the total is known
// (SetTotal) or the position in the input (SetPosition), the share done and
// an estimate of the time left:
//
//	sent 5,400 messages, 1,230/s, 54%, about 4s left
//
// Make one with app.progress, which returns nil when stderr is not a
// terminal or with --quiet: every method of a nil *progress does nothing,
// so callers need no checks. It draws only when told of progress, from the
// caller's goroutine, and is safe for concurrent use. Call Clear before
// writing anything else to the terminal, and Finish at the end.
type progress struct {
	w     io.Writer
	label string // what is counted, as a past participle: "sent"
	unit  string // the plural of what is counted: "messages"
	now   func() time.Time

	mu         sync.Mutex
	start      time.Time
	drawn      time.Time // when the line was last drawn; zero when it is not shown
	count      int64
	total      int64 // of count; 0 when unknown
	done, size int64 // position in the input, when its size is known
}

// progress returns a progress line on stderr for an operation that counts
// unit as label ("sent", "messages"), or nil when stderr is not a
// terminal or --quiet was given.
func (a *app) progress(label, unit string) *progress {
	switch {
	case a.quiet:
		return nil
	case a.progressTo != nil:
		return newProgress(a.progressTo, label, unit, a.progressClock)
	case !isTTY(a.err):
		return nil
	}
	return newProgress(a.errs, label, unit, time.Now)
}

func newProgress(w io.Writer, label, unit string, now func() time.Time) *progress {
	return &progress{w: w, label: label, unit: unit, now: now, start: now()}
}

// Add counts n more.
func (p *progress) Add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count += n
	p.drawLocked()
}

// SetTotal sets how many there are in all, for the share done and the time
// left.
func (p *progress) SetTotal(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total = n
}

// SetPosition tells how far the input has been read (done of size, say
// bytes of a file), for the share done and the time left when the total
// count is not known.
func (p *progress) SetPosition(done, size int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.size = done, size
}

// Clear erases the line, if it is shown, so that other output can follow;
// the next Add draws it again.
func (p *progress) Clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

// Finish erases the line for good: the caller prints its summary next.
func (p *progress) Finish() { p.Clear() }

func (p *progress) clearLocked() {
	if !p.drawn.IsZero() {
		_, _ = io.WriteString(p.w, "\r\x1b[K")
		p.drawn = time.Time{}
	}
}

func (p *progress) drawLocked() {
	now := p.now()
	if !p.drawn.IsZero() && now.Sub(p.drawn) < progressEvery {
		return
	}
	if p.drawn.IsZero() && now.Sub(p.start) < progressEvery {
		return // a short operation shows no progress at all
	}
	p.drawn = now
	_, _ = io.WriteString(p.w, "\r\x1b[K"+p.lineLocked(now))
}

// lineLocked is the text of the progress line at now.
func (p *progress) lineLocked(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", p.label, groupDigits(p.count), p.unit)
	elapsed := now.Sub(p.start)
	if elapsed <= 0 || p.count == 0 {
		return b.String()
	}
	rate := float64(p.count) / elapsed.Seconds()
	fmt.Fprintf(&b, ", %s/s", groupDigits(int64(rate+0.5)))
	var share float64
	switch {
	case p.total > 0:
		share = float64(p.count) / float64(p.total)
	case p.size > 0:
		share = float64(p.done) / float64(p.size)
	default:
		return b.String()
	}
	share = min(share, 1)
	fmt.Fprintf(&b, ", %d%%", int(share*100))
	if share > 0 && share < 1 {
		left := time.Duration(float64(elapsed) * (1 - share) / share)
		fmt.Fprintf(&b, ", about %s left", shortDuration(left))
	}
	return b.String()
}

// groupDigits writes n with thousands separators: 12,345.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// shortDuration writes d to the second: 4s, 2m05s, 1h02m.
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}
