package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
)

// job is one message a scenario sends.
type job struct {
	// key is the job's idempotency-key attribute, and for a good job the
	// id of its item in the effects table.
	key string
	// poison names how a broken job is broken; "" for a good job.
	poison string
	// group and seq are a FIFO job's message group and its place in it
	// (1, 2, ...), counting the group's good jobs only; "" and 0 on a
	// standard queue, and for broken jobs.
	group string
	seq   int
	msg   producer.Message
}

// jobBody is the JSON body the chaosworker reads.
type jobBody struct {
	ID      string `json:"id"`
	SleepMS int    `json:"sleep_ms,omitempty"`
	Poison  string `json:"poison,omitempty"`
	Group   string `json:"group,omitempty"`
	Seq     int    `json:"seq,omitempty"`
	Pad     string `json:"pad,omitempty"`
}

func (b jobBody) String() string {
	out, err := json.Marshal(b)
	if err != nil {
		panic(err) // strings and ints only
	}
	return string(out)
}

// goodJobs returns n good jobs named prefix-000001..., each working for a
// random time in [minMS, maxMS] milliseconds. Every body carries marker,
// which no log may show.
func goodJobs(prefix string, n, minMS, maxMS int, marker string) []job {
	jobs := make([]job, n)
	for i := range jobs {
		id := fmt.Sprintf("%s-%06d", prefix, i+1)
		sleep := minMS
		if maxMS > minMS {
			sleep += rand.IntN(maxMS - minMS + 1)
		}
		jobs[i] = job{key: id, msg: producer.Message{
			Body:           jobBody{ID: id, SleepMS: sleep, Pad: marker}.String(),
			IdempotencyKey: id,
		}}
	}
	return jobs
}

// fifoJobs returns the good jobs of a FIFO queue: perGroup jobs in each of
// groups message groups, named prefix-g01-000001..., in the order they
// are sent (the groups' first jobs, then their second ones, ...). Each
// carries its group and its place in it, which the chaosworker records with
// its effect, and its key as its deduplication ID. They work as goodJobs'
// do.
func fifoJobs(prefix string, groups, perGroup, minMS, maxMS int, marker string) []job {
	var jobs []job
	for seq := 1; seq <= perGroup; seq++ {
		for g := 1; g <= groups; g++ {
			group := fmt.Sprintf("g%02d", g)
			id := fmt.Sprintf("%s-%s-%06d", prefix, group, seq)
			sleep := minMS
			if maxMS > minMS {
				sleep += rand.IntN(maxMS - minMS + 1)
			}
			jobs = append(jobs, job{key: id, group: group, seq: seq, msg: producer.Message{
				Body:            jobBody{ID: id, SleepMS: sleep, Group: group, Seq: seq, Pad: marker}.String(),
				IdempotencyKey:  id,
				GroupID:         group,
				DeduplicationID: id,
			}})
		}
	}
	return jobs
}

// poisonKinds are the broken jobs mixed among good ones, with how each is
// broken; the panic is left to the poison scenario.
var poisonKinds = []struct {
	kind string
	body func(key, marker string) string
}{
	{"a Permanent error", func(key, marker string) string {
		return jobBody{ID: key, Poison: "permanent", Pad: marker}.String()
	}},
	{"invalid JSON", func(key, marker string) string { return `{"id": "` + key + `", "pad": "` + marker + `"` }},
	{"an error on every attempt", func(key, marker string) string {
		return jobBody{ID: key, Poison: "fail", Pad: marker}.String()
	}},
}

// withPoison returns jobs with one broken job after every perPoison good
// ones, named prefix-poison-0001... On a FIFO queue a broken job goes in
// the message group of the good job before it, with its key as its
// deduplication ID.
func withPoison(jobs []job, prefix string, perPoison int, marker string) []job {
	var out []job
	n := 0
	for i, j := range jobs {
		out = append(out, j)
		if (i+1)%perPoison == 0 {
			n++
			k := poisonKinds[(n-1)%len(poisonKinds)]
			key := fmt.Sprintf("%s-poison-%04d", prefix, n)
			m := producer.Message{Body: k.body(key, marker), IdempotencyKey: key}
			if j.msg.GroupID != "" {
				m.GroupID, m.DeduplicationID = j.msg.GroupID, key
			}
			out = append(out, job{key: key, poison: k.kind, msg: m})
		}
	}
	return out
}

// Sizes of the poison scenario's large messages.
const (
	// nearLimit is how far below SQS's 1 MiB message limit the large
	// messages stay.
	nearLimit = 512
	// maxAttrName and maxDataType are SQS's limits on an attribute's name
	// and data type.
	maxAttrName = 256
	maxDataType = 256
	// attrValueSize is the size of each large String attribute value.
	attrValueSize = 64 << 10
)

// poisonSet returns the jobs of the poison scenario: broken jobs the DLQ
// must hold, each with its reason, and good jobs at SQS's limits that must
// be handled once.
//
// SQS takes only bodies of the XML characters #x9, #xA, #xD, #x20-#xD7FF,
// #xE000-#xFFFD and #x10000-#x10FFFF, none empty: a body can be neither
// empty nor invalid UTF-8 (an invalid byte reaches the queue as U+FFFD, the
// Unicode replacement character, when the SDK sends it at all). So the
// nearest inputs stand in for them: a blank body of the whitespace SQS
// allows; a JSON body whose id holds U+FFFD, what invalid UTF-8 becomes on
// its way in; and one whose id is a lone UTF-16 surrogate escape ("\ud800"),
// valid JSON text that is no valid Unicode. Binary attributes do take
// arbitrary bytes: the ten-attribute jobs carry invalid UTF-8 there.
func poisonSet(marker string) (good, poison []job) {
	good = goodJobs("good", 50, 0, 20, marker)
	add := func(list *[]job, key, kind, body string, attrs map[string]sqsworker.MessageAttribute) {
		*list = append(*list, job{key: key, poison: kind, msg: producer.Message{Body: body, IdempotencyKey: key, Attributes: attrs}})
	}
	// Good jobs at the limits.
	add(&good, "good-exotic-ünïcödé-\u00a0-\ufffc-\ud7ff-\ue000", "", jobBody{ID: "good-exotic-ünïcödé-\u00a0-\ufffc-\ud7ff-\ue000", Pad: marker + "\t\r\n"}.String(), nil)
	add(&good, "good-near-1MiB", "", jobBody{ID: "good-near-1MiB", Pad: marker}.String(), nil)
	fill(&good[len(good)-1].msg, producer.MaxMessageSize-nearLimit, func(m *producer.Message, n int) {
		m.Body = jobBody{ID: "good-near-1MiB", Pad: marker + strings.Repeat("p", n)}.String()
	})
	add(&good, "good-ten-attributes", "", jobBody{ID: "good-ten-attributes", Pad: marker}.String(), tenAttributes("good"))

	// Broken bodies.
	add(&poison, "poison-invalid-json", "invalid JSON", `{"id": "poison-invalid-json", "pad": "`+marker+`", "sleep_ms": `, nil)
	add(&poison, "poison-json-array", "a JSON array, not an object", `["poison-json-array", "`+marker+`"]`, nil)
	add(&poison, "poison-trailing-data", "JSON with data after the object", jobBody{ID: "poison-trailing-data", Pad: marker}.String()+` {"id": "again"}`, nil)
	add(&poison, "poison-blank", "a blank body (SQS refuses empty ones)", " \t\r\n \n\t ", nil)
	add(&poison, "poison-replacement-char", "invalid UTF-8 as it reaches a queue (U+FFFD)", "{\"id\": \"poison-\ufffd\ufffd-invalid-utf8\", \"pad\": \""+marker+"\"}", nil)
	add(&poison, "poison-lone-surrogate", `a lone surrogate escape ("\ud800")`, `{"id": "poison-\ud800-lone-surrogate", "pad": "`+marker+`"}`, nil)
	add(&poison, "poison-no-id", "a JSON object without an id", `{"sleep_ms": 1, "pad": "`+marker+`"}`, nil)
	add(&poison, "poison-near-1MiB", "invalid JSON near 1 MiB", "{"+marker, nil)
	fill(&poison[len(poison)-1].msg, producer.MaxMessageSize-nearLimit, func(m *producer.Message, n int) {
		m.Body = "{" + marker + strings.Repeat("x", n)
	})
	add(&poison, "poison-ten-attributes", "invalid JSON with ten attributes at their limits", "not json "+marker, tenAttributes("poison"))
	// Broken jobs.
	add(&poison, "poison-permanent", "a Permanent error", jobBody{ID: "poison-permanent", Poison: "permanent", Pad: marker}.String(), nil)
	add(&poison, "poison-fail", "an error on every attempt", jobBody{ID: "poison-fail", Poison: "fail", Pad: marker}.String(), nil)
	add(&poison, "poison-panic", "a panic on every attempt", jobBody{ID: "poison-panic", Poison: "panic", Pad: marker}.String(), nil)
	return good, poison
}

// fill grows m to size bytes as SQS counts them: grow(m, n) must add n
// bytes to m's body.
func fill(m *producer.Message, size int, grow func(m *producer.Message, n int)) {
	if n := size - producer.Size(*m); n > 0 {
		grow(m, n)
	}
}

// tenAttributes returns nine attributes which, with the idempotency key, make
// SQS's ten: names and data types of SQS's largest sizes, large String
// values of every character class SQS allows, a Number of 38 digits, and a
// Binary value that is not valid UTF-8.
func tenAttributes(prefix string) map[string]sqsworker.MessageAttribute {
	attrs := map[string]sqsworker.MessageAttribute{}
	name := func(i int) string {
		n := fmt.Sprintf("%s-attr-%d.", prefix, i)
		return n + strings.Repeat("n", maxAttrName-len(n))
	}
	label := func(base string, i int) string {
		l := fmt.Sprintf("%s.label%d-", base, i)
		return l + strings.Repeat("t", maxDataType-len(l))
	}
	chars := "ascii \t\r\n é ß € \u00a0 \ud7ff \ue000 \ufffd "
	for i := range 7 {
		attrs[name(i)] = sqsworker.MessageAttribute{
			DataType:    label("String", i),
			StringValue: strings.Repeat(chars, attrValueSize/len(chars)),
		}
	}
	attrs[name(7)] = sqsworker.MessageAttribute{DataType: label("Number", 7), StringValue: "-99999999999999999999999999999999999999"}
	bin := make([]byte, 1024)
	for i := range bin {
		bin[i] = byte(255 - i%256) // 0xff, 0xfe, ...: not UTF-8
	}
	attrs[name(8)] = sqsworker.MessageAttribute{DataType: label("Binary", 8), BinaryValue: bin}
	return attrs
}

// preload sends jobs with SendMessageBatch, from a few goroutines at once.
// A FIFO queue's message groups are sent each from one goroutine, in the
// order of jobs.
func preload(ctx context.Context, p *producer.Producer, jobs []job) error {
	const chunk, workers = 250, 8
	// lanes are sent in parallel, each one's messages in order.
	var lanes [][]producer.Message
	lane := map[string]int{}
	for i, j := range jobs {
		g := j.msg.GroupID
		if g == "" { // standard queue: a chunk is a lane
			if i%chunk == 0 {
				lanes = append(lanes, nil)
			}
			lanes[len(lanes)-1] = append(lanes[len(lanes)-1], j.msg)
			continue
		}
		n, ok := lane[g]
		if !ok {
			n = len(lanes)
			lane[g] = n
			lanes = append(lanes, nil)
		}
		lanes[n] = append(lanes[n], j.msg)
	}
	errs := make([]error, len(lanes))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, msgs := range lanes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for len(msgs) > 0 && errs[i] == nil {
				n := min(chunk, len(msgs))
				if _, err := p.SendBatch(ctx, msgs[:n]); err != nil {
					errs[i] = err
				}
				msgs = msgs[n:]
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("chaos: preloading jobs: %w", err)
		}
	}
	return nil
}
