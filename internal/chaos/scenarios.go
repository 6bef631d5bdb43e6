package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sqsworker/sqsworker/internal/ctxsleep"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
)

// Sizes of the scenarios, short and full.
const (
	killJobsShort, killJobsFull     = 2000, 10000
	killsShort, killsFull           = 3, 10
	outageJobsShort, outageJobsFull = 1000, 5000
	// perPoison good jobs come before each broken one in the kill, outage
	// and lost-reply scenarios.
	perPoison = 100
	// replyLossEvery is how often a reply is lost in the lost-reply
	// scenarios.
	replyLossEvery   = 250 * time.Millisecond
	sigtermJobs      = 100
	sigtermJobLength = 3 * time.Second
	// Jobs work for a random time in this range, in milliseconds, so that
	// the queue is still being worked when the faults come.
	jobMinMS, jobMaxMS = 50, 150
	// The FIFO scenarios' jobs are in fifoGroups message groups, with as
	// many good jobs in each as these say, and a broken one after every
	// fifoPerPoison good ones, in the group of the one before it: prime to
	// fifoGroups, so that the broken jobs are spread over the groups.
	fifoGroups                                  = 20
	fifoKillPerGroupShort, fifoKillPerGroupFull = 30, 100
	fifoOutagePerGroupShort, fifoOutagePerGroup = 20, 100
	fifoPerPoison                               = 49
	// fifoSigtermPerGroup jobs of sigtermJobLength in each group of the
	// FIFO SIGTERM scenario, whose queue lets each message be received
	// fifoSigtermMaxReceives times.
	fifoSigtermPerGroup    = 5
	fifoSigtermMaxReceives = 1
	// outageAfter is the share of the jobs received before an outage
	// starts, and outageWait the longest wait for it.
	outageAfter = 0.15
	outageWait  = 30 * time.Second
)

// scenarios returns every scenario, in the order Run runs them.
func scenarios() []scenario {
	return []scenario{
		killScenario("kill", false),
		outageScenario("sqs-refuse-5s", false, sqsSide, faultproxy.Refuse, 5*time.Second, 5*time.Second),
		outageScenario("sqs-refuse-30s", false, sqsSide, faultproxy.Refuse, 30*time.Second, 10*time.Second),
		outageScenario("sqs-blackhole-30s", false, sqsSide, faultproxy.Blackhole, 30*time.Second, 10*time.Second),
		outageScenario("ddb-refuse-60s", false, ddbSide, faultproxy.Refuse, 60*time.Second, 20*time.Second),
		outageScenario("ddb-blackhole-30s", false, ddbSide, faultproxy.Blackhole, 30*time.Second, 10*time.Second),
		outageScenario("sqs-lose-replies-30s", false, sqsSide, faultproxy.LoseReplies, 30*time.Second, 10*time.Second),
		outageScenario("ddb-lose-replies-30s", false, ddbSide, faultproxy.LoseReplies, 30*time.Second, 10*time.Second),
		{name: "sigterm", spec: sigtermSpec},
		{name: "poison", spec: poisonSpec},
		killScenario("fifo-kill", true),
		// Its messages reach their last receive within the outage, and
		// wait in flight there, only with a lower maxReceiveCount: with 5,
		// a full run's 60 s brought none there.
		withMaxReceives(outageScenario("fifo-ddb-refuse-60s", true, ddbSide, faultproxy.Refuse, 60*time.Second, 20*time.Second),
			2, 2),
		outageScenario("fifo-sqs-lose-replies-30s", true, sqsSide, faultproxy.LoseReplies, 30*time.Second, 10*time.Second),
		{name: "fifo-sigterm", spec: fifoSigtermSpec},
	}
}

// mixedJobs returns a scenario's jobs, good and broken: on a standard
// queue, n good ones with a broken one after every perPoison; on a FIFO
// queue, perGroup good ones in each of fifoGroups groups, with a broken one
// after every fifoPerPoison.
func mixedJobs(name string, fifo bool, n, perGroup int, marker string) []job {
	if fifo {
		return withPoison(fifoJobs(name, fifoGroups, perGroup, jobMinMS, jobMaxMS, marker), name, fifoPerPoison, marker)
	}
	return withPoison(goodJobs(name, n, jobMinMS, jobMaxMS, marker), name, perPoison, marker)
}

// withMaxReceives sets the maxReceiveCount of sc's queue, in short and in
// full mode, naming it in the label when it is not maxReceiveCount.
func withMaxReceives(sc scenario, short, full int) scenario {
	inner := sc.spec
	sc.spec = func(isFull bool, marker string) spec {
		sp := inner(isFull, marker)
		sp.maxReceiveCount = short
		if isFull {
			sp.maxReceiveCount = full
		}
		if sp.maxReceiveCount != maxReceiveCount {
			mrc := fmt.Sprintf("maxReceiveCount %d", sp.maxReceiveCount)
			if l, ok := strings.CutSuffix(sp.label, ")"); ok { // "name (20s)"
				sp.label = l + ", " + mrc + ")"
			} else {
				sp.label += " (" + mrc + ")"
			}
		}
		return sp
	}
	return sc
}

// killScenario: the worker's process group is killed with SIGKILL every 2
// to 4 seconds and restarted at once.
func killScenario(name string, fifo bool) scenario {
	return scenario{name: name, spec: func(full bool, marker string) spec {
		return killSpec(name, fifo, full, marker)
	}}
}

func killSpec(name string, fifo, full bool, marker string) spec {
	jobs, perGroup, kills := killJobsShort, fifoKillPerGroupShort, killsShort
	if full {
		jobs, perGroup, kills = killJobsFull, fifoKillPerGroupFull, killsFull
	}
	return spec{
		label: name,
		fifo:  fifo,
		jobs:  mixedJobs(name, fifo, jobs, perGroup, marker),
		script: func(ctx context.Context, r *run) error {
			for i := 1; i <= kills; i++ {
				if !ctxsleep.Sleep(ctx, 2*time.Second+rand.N(2*time.Second)) {
					return ctx.Err()
				}
				r.watchWorker()
				d, err := r.depth(ctx, r.queueURL)
				if err != nil {
					return err
				}
				if d.visible == 0 && d.delayed == 0 && d.inFlight == 0 {
					r.note("the queue was empty before kill %d of %d", i, kills)
					return nil
				}
				r.killWorker()
				r.log.Info("kill", "n", i, "of", kills, "depth", d.String())
				if err := r.startWorker(); err != nil {
					return err
				}
			}
			r.note("%d kills (SIGKILL to the worker's process group), each followed by a restart", kills)
			return nil
		},
	}
}

// side picks the proxy a fault goes to.
type side struct {
	name  string
	proxy func(r *run) *faultproxy.Proxy
}

var (
	sqsSide = side{"SQS", func(r *run) *faultproxy.Proxy { return r.sqsProxy }}
	ddbSide = side{"DynamoDB", func(r *run) *faultproxy.Proxy { return r.ddbProxy }}
)

// outageScenario makes a scenario in which the worker loses one service
// for a wall-clock time (named in full mode, short in short mode), once it
// has received a share of the jobs: its connections are refused, or
// blackholed, or one reply in each replyLossEvery is lost. fifo puts the
// jobs on a FIFO queue.
func outageScenario(name string, fifo bool, s side, m faultproxy.Mode, full, short time.Duration) scenario {
	return scenario{name: name, spec: func(isFull bool, marker string) spec {
		n, perGroup, d := outageJobsShort, fifoOutagePerGroupShort, short
		if isFull {
			n, perGroup, d = outageJobsFull, fifoOutagePerGroup, full
		}
		jobs := mixedJobs(name, fifo, n, perGroup, marker)
		return spec{
			label: label(name, d, full),
			fifo:  fifo,
			jobs:  jobs,
			script: func(ctx context.Context, r *run) error {
				threshold := int(float64(len(jobs)) * (1 - outageAfter))
				var last depth
				started := time.Now()
				_, err := r.waitFor(ctx, outageWait, func() bool {
					d, err := r.depth(ctx, r.queueURL)
					if err != nil {
						return false
					}
					last = d
					return d.visible <= threshold
				})
				if err != nil {
					return err
				}
				p := s.proxy(r)
				before := p.Stats()
				r.log.Info("outage starts", "service", s.name, "mode", m.String(), "for", d,
					"after", time.Since(started).Round(time.Millisecond), "depth", last.String())
				ok, ferr := fault(ctx, p, m, d)
				if err := p.Pass(); err != nil {
					return err
				}
				if ferr != nil {
					return ferr
				}
				if !ok {
					return ctx.Err()
				}
				st := p.Stats()
				r.log.Info("outage over", "service", s.name, "proxy", fmt.Sprintf("%+v", st))
				if m == faultproxy.LoseReplies {
					r.note("%s: %d replies lost over %s, one every %s, from when the queue held %s",
						s.name, st.LostReplies-before.LostReplies, d, replyLossEvery, last)
				} else {
					r.note("%s %s for %s, from when the queue held %s; connections reset %d, stalled %d",
						s.name, m, d, last, st.Reset-before.Reset, st.Stalled-before.Stalled)
				}
				return nil
			},
		}
	}}
}

// fault puts p in mode m for d. It reports whether d passed; the caller
// sets p back to Pass.
func fault(ctx context.Context, p *faultproxy.Proxy, m faultproxy.Mode, d time.Duration) (bool, error) {
	switch m {
	case faultproxy.Refuse:
		if err := p.Refuse(); err != nil {
			return false, err
		}
		return ctxsleep.Sleep(ctx, d), nil
	case faultproxy.Blackhole:
		if err := p.Blackhole(); err != nil {
			return false, err
		}
		return ctxsleep.Sleep(ctx, d), nil
	case faultproxy.LoseReplies:
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if p.Mode() != faultproxy.LoseReplies { // the last loss happened
				if err := p.LoseReplies(1); err != nil {
					return false, err
				}
			}
			if !ctxsleep.Sleep(ctx, min(replyLossEvery, time.Until(end))) {
				return false, nil
			}
		}
		return true, nil
	}
	return false, fmt.Errorf("chaos: no outage of mode %s", m)
}

// sigtermSpec: 100 jobs of 3s, all in flight, then SIGTERM: each must
// finish or be released (or be retried as the worker stops, failed for a
// dependency), none stay invisible otherwise; then a restarted worker
// drains the queue.
func sigtermSpec(_ bool, marker string) spec {
	ms := int(sigtermJobLength / time.Millisecond)
	return spec{
		label:       "sigterm",
		jobs:        goodJobs("sigterm", sigtermJobs, ms, ms, marker),
		concurrency: sigtermJobs,
		script:      sigtermScript(sigtermJobs, sigtermJobs, "jobs were in flight"),
	}
}

// fifoSigtermSpec: FIFO jobs of 3s in fifoGroups groups, on a queue whose
// redrive policy lets each message be received once, so that every
// message is on its last receive: once one of each group is in flight,
// SIGTERM. The running jobs finish; a message the worker's last long polls
// (free handler slots keep some under way) bring while it stops, its
// group unlocked by a finished job, is not released, which would have
// SQS dead-letter it on its next receive, but runs. None stays invisible
// but those retried as the worker stops, and a restarted worker drains the
// queue.
func fifoSigtermSpec(_ bool, marker string) spec {
	const jobs = fifoGroups * fifoSigtermPerGroup
	ms := int(sigtermJobLength / time.Millisecond)
	return spec{
		label: fmt.Sprintf("fifo-sigterm (maxReceiveCount %d)", fifoSigtermMaxReceives),
		fifo:  true,
		jobs:  fifoJobs("fifo-sigterm", fifoGroups, fifoSigtermPerGroup, ms, ms, marker),
		// Handler slots to spare, so that receives wait in long polls
		// while every group is locked, and bring the groups' next
		// messages once SIGTERM has come and their jobs are done.
		concurrency:     2 * fifoGroups,
		maxReceiveCount: fifoSigtermMaxReceives,
		script:          sigtermScript(jobs, fifoGroups, "groups had a job in flight"),
	}
}

// sigtermScript waits for inFlight messages in flight (inFlightNote names
// what they are in the note when fewer came), then sends the worker SIGTERM a second later: each of
// the jobs must finish or be released (or be retried as the worker stops,
// as its log says), none stay invisible otherwise; then a restarted worker
// drains the queue.
func sigtermScript(jobs, inFlight int, inFlightNote string) func(ctx context.Context, r *run) error {
	return func(ctx context.Context, r *run) error {
		var last depth
		all, err := r.waitFor(ctx, 30*time.Second, func() bool {
			d, err := r.depth(ctx, r.queueURL)
			if err != nil {
				return false
			}
			last = d
			return d.inFlight >= inFlight
		})
		if err != nil {
			return err
		}
		if !all {
			r.note("only %d of %d %s at SIGTERM", last.inFlight, inFlight, inFlightNote)
		}
		if !ctxsleep.Sleep(ctx, time.Second) { // the jobs are a third done
			return ctx.Err()
		}
		before, err := r.appliedCount(ctx)
		if err != nil {
			return err
		}
		graceful, took := r.worker.terminate(stopTimeout)
		if !graceful {
			r.fail("the worker did not stop within %s of SIGTERM; killed", stopTimeout)
		} else if c := r.worker.exitCode(); c != 0 {
			r.fail("the worker exited with code %d after SIGTERM", c)
		}
		after, err := r.depth(ctx, r.queueURL)
		if err != nil {
			return err
		}
		done, err := r.appliedCount(ctx)
		if err != nil {
			return err
		}
		r.note("SIGTERM with %d jobs in flight and %d done: the worker stopped in %s; %d jobs finished in all, %d left in the queue (%s)",
			last.inFlight, before, took.Round(100*time.Millisecond), done, after.total(), after)
		if after.inFlight > 0 {
			// A job failed for a dependency as the worker stops (the
			// idempotency store slow on a loaded machine) is retried:
			// hidden for its backoff, or until the worker's last
			// receives have surely ended, on purpose.
			switch retried, err := retriedAtStop(r.out.Name(), r.worker.pid()); {
			case err != nil:
				r.fail("%d messages still invisible after the worker stopped, and its log unread: %v", after.inFlight, err)
			case after.inFlight > retried:
				r.fail("%d messages still invisible after the worker stopped: neither finished, released nor retried (%d retried as it stopped)", after.inFlight, retried)
			default:
				r.note("%d messages invisible after the worker stopped, of the %d it retried as it stopped: hidden for their backoff", after.inFlight, retried)
			}
		}
		if done+after.total() < jobs {
			r.fail("after SIGTERM, %d jobs finished and %d are in the queue, of %d", done, after.total(), jobs)
		}
		return r.startWorker()
	}
}

// poisonSpec: broken messages among good ones at SQS's limits.
func poisonSpec(_ bool, marker string) spec {
	good, poison := poisonSet(marker)
	return spec{
		label: "poison",
		jobs:  append(good, poison...),
		script: func(ctx context.Context, r *run) error {
			r.note("%d poison messages among %d good ones", len(poison), len(good))
			return nil
		},
	}
}
