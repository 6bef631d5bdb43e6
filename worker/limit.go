package worker

import (
	"math"
	"time"

	"golang.org/x/time/rate"
)

// limits are the token buckets a consumer's receives obey: its own
// Config.RateLimit and a MultiWorker's MultiConfig.RateLimit. Tokens are
// taken for the messages a receive brought, after it, and a receive asks
// for no more than there are tokens: a limited queue never holds a message
// invisible while it waits for a token.
type limits []*rate.Limiter

// tokens is the whole tokens every bucket holds now; math.MaxInt without
// limits.
func (l limits) tokens() int {
	n := math.MaxInt
	now := time.Now()
	for _, lim := range l {
		n = min(n, int(math.Floor(lim.TokensAt(now))))
	}
	return n
}

// untilOne is how long until every bucket holds a whole token.
func (l limits) untilOne() time.Duration {
	var d time.Duration
	now := time.Now()
	for _, lim := range l {
		if t := lim.TokensAt(now); t < 1 {
			d = max(d, time.Duration((1-t)/float64(lim.Limit())*float64(time.Second)))
		}
	}
	return d + time.Millisecond
}

// take spends n tokens of every bucket.
func (l limits) take(n int) {
	if n == 0 {
		return
	}
	now := time.Now()
	for _, lim := range l {
		// n is at most the tokens held when the receive was made, and so
		// within the burst; another queue sharing the bucket may have
		// spent them meanwhile, which puts it in debt that the next
		// receive waits out.
		lim.ReserveN(now, n)
	}
}
