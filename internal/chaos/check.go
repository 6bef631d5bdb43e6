package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// maxListed is how many job keys a failure names at most.
const maxListed = 5

// A FIFO group's order item in the effects table, as the chaosworker
// writes it (its OrderItem and OrderAttr): the id is orderItemPrefix and
// the group, the list of the places of the group's jobs is orderAttr.
const (
	orderItemPrefix = "order#"
	orderAttr       = "order"
)

// receiveAttr is the chaosworker's ReceiveAttr: on a job's item, the
// receive count of the message that applied its effect.
const receiveAttr = "receive"

// check runs the end-of-scenario checks, once the worker has stopped, and
// fills res's counts.
func (r *run) check(ctx context.Context, res *Result) {
	// Nothing left in the main queue.
	if d, err := r.depth(ctx, r.queueURL); err != nil {
		r.fail("%v", err)
	} else if d.total() != 0 {
		r.fail("the main queue still holds messages: %s", d)
	}
	applied, receives, err := r.effects(ctx)
	if err != nil {
		r.fail("%v", err)
		return
	}
	r.noteReceives(receives)
	dl, err := r.deadLetters(ctx)
	if err != nil {
		r.fail("%v", err)
		return
	}

	// Every good job applied exactly once, no poison job applied.
	var lost, twice, strays []string
	for key := range r.good {
		switch n := applied[key]; {
		case n == 0:
			lost = append(lost, key)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s×%d", key, n))
		}
	}
	for key, n := range applied {
		if !r.good[key] {
			strays = append(strays, fmt.Sprintf("%s×%d", key, n))
		}
	}
	res.Lost, res.Twice = len(lost), len(twice)
	if len(twice) > 0 {
		r.fail("%d good jobs applied more than once: %s", len(twice), list(twice))
	}
	if len(lost) > 0 {
		r.fail("%d good jobs never applied: %s", len(lost), list(lost))
	}
	if len(strays) > 0 {
		r.fail("effects applied for %d items that are no good job: %s", len(strays), list(strays))
	}
	if r.sp.fifo {
		r.checkOrder(ctx, res)
	}

	// The dead-letter queue holds each poison job, and nothing else.
	seen := map[string]int{}
	var healthy, unknown []string
	healthyReasons := map[string]int{}
	poisonReasons := map[string]string{}
	for _, m := range dl {
		key, _ := m.Attribute(idempotency.KeyAttribute)
		reason := failureReason(m)
		switch {
		case r.poison[key] != "":
			seen[key]++
			if seen[key] == 1 {
				poisonReasons[key] = reason
			}
		case r.good[key]:
			seen[key]++
			healthy = append(healthy, key)
			healthyReasons[strings.ReplaceAll(reason, key, "<job>")]++
		default:
			unknown = append(unknown, fmt.Sprintf("message %s (key %q)", m.ID, key))
		}
	}
	var gone []string
	for _, key := range lost {
		if seen[key] == 0 {
			gone = append(gone, key)
		}
	}
	if len(gone) > 0 {
		r.fail("%d of the good jobs never applied are not in the dead-letter queue either: %s", len(gone), list(gone))
	}
	r.notePoisonReasons(poisonReasons)
	res.DeadLetteredHealthy = len(healthy)
	res.DeadLetteredPoison = len(poisonReasons)
	if len(healthy) > 0 {
		r.fail("%d good jobs dead-lettered: %s", len(healthy), list(healthy))
		reasons := sortedKeys(healthyReasons)
		sort.SliceStable(reasons, func(i, j int) bool { return healthyReasons[reasons[i]] > healthyReasons[reasons[j]] })
		for i, reason := range reasons {
			if i == maxListed {
				r.note("good jobs dead-lettered for %d other reasons", len(reasons)-maxListed)
				break
			}
			r.note("good jobs dead-lettered %d× with: %s", healthyReasons[reason], reason)
		}
	}
	if len(unknown) > 0 {
		r.fail("%d unknown messages dead-lettered: %s", len(unknown), list(unknown))
	}
	for _, key := range sortedKeys(r.poison) {
		switch n := seen[key]; {
		case n == 0:
			r.fail("poison job %s (%s) is not in the dead-letter queue", key, r.poison[key])
		case n > 1:
			// Only broken jobs in the DLQ, but more copies than one: what
			// an at-least-once move leaves after a fault.
			r.note("poison job %s (%s) is in the dead-letter queue %d times", key, r.poison[key], n)
		}
	}

	// No log shows a message body.
	if n, err := countInFile(r.out.Name(), r.marker); err != nil {
		r.fail("reading the log: %v", err)
	} else if n > 0 {
		r.fail("%d log lines show a message body", n)
	}
}

// checkOrder checks that the good jobs of each FIFO message group had
// their effects applied in the order they were sent, each with its order
// record (so that a worker that wrote none fails). Broken jobs apply
// none, and their groups go on once they are dead-lettered: the order is
// that of the good jobs. A job applied twice is counted by the effects'
// check; here only its first application counts.
func (r *run) checkOrder(ctx context.Context, res *Result) {
	orders, err := r.orders(ctx)
	if err != nil {
		r.fail("%v", err)
		return
	}
	want := map[string]int{} // group → its good jobs
	for _, j := range r.sp.jobs {
		if j.poison == "" && j.group != "" {
			want[j.group] = max(want[j.group], j.seq)
		}
	}
	var late, strays, missing []string
	for _, g := range sortedKeys(want) {
		if n := want[g] - distinct(orders[g], want[g]); n > 0 {
			missing = append(missing, fmt.Sprintf("group %s: %d of %d", g, n, want[g]))
		}
	}
	groups := 0
	for _, g := range sortedKeys(orders) {
		if want[g] == 0 {
			strays = append(strays, fmt.Sprintf("group %s", g))
			continue
		}
		groups++
		seen := map[int]bool{}
		top := 0
		for _, seq := range orders[g] {
			switch {
			case seq < 1 || seq > want[g]:
				strays = append(strays, fmt.Sprintf("group %s: job %d", g, seq))
			case seen[seq]:
			case seq < top:
				late = append(late, fmt.Sprintf("group %s: job %d after job %d", g, seq, top))
			}
			seen[seq] = true
			top = max(top, seq)
		}
	}
	res.OutOfOrder = len(late)
	if len(late) > 0 {
		r.fail("%d good jobs applied out of their group's order: %s", len(late), list(late))
	}
	if len(strays) > 0 {
		r.fail("%d order records of no good job: %s", len(strays), list(strays))
	}
	if len(missing) > 0 {
		r.fail("good jobs with no order record (written with their effects) in %d groups: %s", len(missing), list(missing))
	}
	r.log.Info("order checked", "groups", groups, "out_of_order", len(late))
}

// distinct counts the places from 1 to n among seqs, each once.
func distinct(seqs []int, n int) int {
	seen := map[int]bool{}
	for _, seq := range seqs {
		if seq >= 1 && seq <= n {
			seen[seq] = true
		}
	}
	return len(seen)
}

// orders reads the order items of the effects table: for each message
// group, the places of its jobs in the order their effects were applied.
func (r *run) orders(ctx context.Context) (map[string][]int, error) {
	out := map[string][]int{}
	p := dynamodb.NewScanPaginator(r.ddb, &dynamodb.ScanInput{TableName: &r.effectsTable, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("scanning %s: %w", r.effectsTable, err)
		}
		for _, item := range page.Items {
			id, _ := item["id"].(*dtypes.AttributeValueMemberS)
			l, _ := item[orderAttr].(*dtypes.AttributeValueMemberL)
			if id == nil || l == nil {
				continue
			}
			group, ok := strings.CutPrefix(id.Value, orderItemPrefix)
			if !ok {
				return nil, fmt.Errorf("item %s of %s: an order list on an item that is no group's", id.Value, r.effectsTable)
			}
			for _, v := range l.Value {
				n, _ := v.(*dtypes.AttributeValueMemberN)
				if n == nil {
					return nil, fmt.Errorf("item %s of %s: an order entry that is no number", id.Value, r.effectsTable)
				}
				seq, err := strconv.Atoi(n.Value)
				if err != nil {
					return nil, fmt.Errorf("item %s of %s: order entry %q: %w", id.Value, r.effectsTable, n.Value, err)
				}
				out[group] = append(out[group], seq)
			}
		}
	}
	return out, nil
}

// notePoisonReasons notes why the poison jobs were dead-lettered, by kind
// of poison and reason.
func (r *run) notePoisonReasons(reasons map[string]string) {
	type group struct {
		n    int
		keys []string
	}
	groups := map[string]*group{}
	for key, reason := range reasons {
		g := r.poison[key] + "\x00" + strings.ReplaceAll(reason, key, "<job>")
		if groups[g] == nil {
			groups[g] = &group{}
		}
		groups[g].n++
		groups[g].keys = append(groups[g].keys, key)
	}
	for _, g := range sortedKeys(groups) {
		kind, reason, _ := strings.Cut(g, "\x00")
		if groups[g].n == 1 {
			r.note("%s (%s) dead-lettered: %s", groups[g].keys[0], kind, reason)
		} else {
			r.note("%d poison jobs (%s) dead-lettered: %s", groups[g].n, kind, reason)
		}
	}
}

// effects reads the effects table: how many times each item was applied,
// and the receive count of the message that applied it last (0 when the
// item does not say).
func (r *run) effects(ctx context.Context) (applied, receives map[string]int, err error) {
	applied, receives = map[string]int{}, map[string]int{}
	p := dynamodb.NewScanPaginator(r.ddb, &dynamodb.ScanInput{TableName: &r.effectsTable, ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("scanning %s: %w", r.effectsTable, err)
		}
		for _, item := range page.Items {
			id, _ := item["id"].(*dtypes.AttributeValueMemberS)
			n, _ := item["applied"].(*dtypes.AttributeValueMemberN)
			if id == nil || n == nil {
				continue
			}
			v, err := strconv.Atoi(n.Value)
			if err != nil {
				return nil, nil, fmt.Errorf("item %s of %s: applied %q: %w", id.Value, r.effectsTable, n.Value, err)
			}
			applied[id.Value] = v
			if rc, ok := item[receiveAttr].(*dtypes.AttributeValueMemberN); ok {
				receives[id.Value], _ = strconv.Atoi(rc.Value)
			}
		}
	}
	return applied, receives, nil
}

// noteReceives notes how many good jobs' effects were applied at each
// receive of their message: how close to the dead-letter queue a scenario
// brought its jobs, which a pass or a failure alone does not tell.
func (r *run) noteReceives(receives map[string]int) {
	var counts []int
	for key := range r.good {
		rc := receives[key]
		if rc <= 0 {
			continue
		}
		for len(counts) <= rc {
			counts = append(counts, 0)
		}
		counts[rc]++
	}
	if len(counts) <= 2 { // none, or all at their first receive
		return
	}
	var parts []string
	for rc, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d at receive %d", n, rc))
		}
	}
	r.note("good jobs applied: %s (maxReceiveCount %d)", strings.Join(parts, ", "), r.sp.maxReceiveCount)
}

// appliedCount returns the number of good jobs applied at least once.
func (r *run) appliedCount(ctx context.Context) (int, error) {
	applied, _, err := r.effects(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for key := range r.good {
		if applied[key] > 0 {
			n++
		}
	}
	return n, nil
}

// deadLetters receives every message of the dead-letter queue: at least as
// many as the queue's depth said before, until three receives in a row come
// back empty (for 90s at most when fewer came). A receive whose response is
// lost hides what the emulator handed it: receives are not retried by the
// SDK, and hold messages for 15s only, so that such messages come back and
// are read again (each is counted once). A FIFO dead-letter queue hands
// out a group's next message only once the one before is gone: each
// message is deleted once read.
func (r *run) deadLetters(ctx context.Context) ([]*sqsworker.Message, error) {
	want, err := r.depth(ctx, r.dlqURL)
	if err != nil {
		return nil, err
	}
	var all []*sqsworker.Message
	seen := map[string]bool{}
	giveUp := time.Now().Add(90 * time.Second)
	for empty := 0; empty < 3 || (len(all) < want.total() && time.Now().Before(giveUp)); {
		out, err := r.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &r.dlqURL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 15,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		}, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
		if err != nil {
			if ctx.Err() != nil || time.Now().After(giveUp) {
				return nil, fmt.Errorf("receiving from the dead-letter queue: %w", err)
			}
			r.log.Warn("receiving from the dead-letter queue failed; its messages come back in 15s", "error", err)
			time.Sleep(time.Second)
			continue
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		for i := range out.Messages {
			m := sqsmsg.FromSDK(r.dlqURL, &out.Messages[i])
			if !seen[m.ID] {
				seen[m.ID] = true
				all = append(all, m)
			}
			if r.sp.fifo {
				if _, err := r.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &r.dlqURL, ReceiptHandle: out.Messages[i].ReceiptHandle}); err != nil {
					r.log.Warn("deleting a message read from the dead-letter queue failed; it comes back in 15s", "error", err)
				}
			}
		}
	}
	r.log.Info("dead-letter queue read", "depth_before", want.String(), "received", len(all))
	if len(all) != want.total() {
		r.fail("the dead-letter queue's depth was %d (%s) but %d messages could be received from it", want.total(), want, len(all))
	}
	return all, nil
}

// failureReason says why a message was dead-lettered, from its failure
// metadata.
func failureReason(m *sqsworker.Message) string {
	f, ok := sqsworker.ParseFailure(m.MessageAttributes)
	if !ok {
		if m.Attributes[sqsworker.AttrDeadLetterSource] != "" {
			return "moved by SQS's redrive policy, without failure metadata"
		}
		return "no failure metadata"
	}
	msg := f.Error
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return fmt.Sprintf("class %s after %d attempt(s): %s", f.ErrorClass, f.Attempts, msg)
}

// countInFile counts the lines of a file that hold s.
func countInFile(name, s string) (int, error) {
	n := 0
	err := eachLine(name, func(line []byte) {
		if strings.Contains(string(line), s) {
			n++
		}
	})
	return n, err
}

// eachLine calls f with each line of the file name (up to 16 MiB each).
func eachLine(name string, f func(line []byte)) error {
	file, err := os.Open(name)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f(sc.Bytes())
	}
	return sc.Err()
}

// list names up to maxListed items, sorted.
func list(items []string) string {
	s := slices.Clone(items)
	sort.Strings(s)
	if len(s) > maxListed {
		return strings.Join(s[:maxListed], ", ") + fmt.Sprintf(" and %d more", len(s)-maxListed)
	}
	return strings.Join(s, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// retriedAtStop returns how many messages the worker of pid retried once
// it was stopping (postponed too, when it logs at the debug level), from its
// log lines in the scenario's log (name): the messages it leaves hidden on
// purpose, for their backoff or until its last receives have surely ended.
func retriedAtStop(name string, pid int) (int, error) {
	stopping := false
	ids := map[string]bool{}
	err := eachLine(name, func(b []byte) {
		var line struct {
			Msg       string `json:"msg"`
			Pid       int    `json:"pid"`
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal(b, &line) != nil || line.Pid != pid {
			return
		}
		switch line.Msg {
		case "shutting down":
			stopping = true
		case "dependency unavailable; retrying", "handler failed; retrying", "message postponed":
			if stopping {
				ids[line.MessageID] = true
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if !stopping {
		return 0, fmt.Errorf("worker %d logged no shutdown", pid)
	}
	return len(ids), nil
}
