package sqstest

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// queue is one queue of a Fake. All of its state is guarded by the Fake's
// mutex.
type queue struct {
	name, url, arn    string
	fifo              bool
	attrs             map[string]string
	created, modified time.Time
	msgs              []*message // not deleted, in the order sent
	dedup             map[string]dedupEntry
	seq               uint64
	// Receipt handles name a message by its ordinal and a receive by its
	// count, signed with the queue's key (see handle), so that the queue
	// needs no record of a message once it is deleted: received are the
	// messages of msgs received at least once, by ordinal; gone records
	// only what a handle cannot tell, by ordinal: the receive count of a
	// message deleted after more than one receive (its earlier handles
	// stay invalid), and 0 for a message moved to the dead-letter queue
	// (all of its handles are).
	key      []byte
	ordinals uint64 // given out
	received map[uint64]*message
	gone     map[uint64]int32
	// attempts are the FIFO receives that a receive with the same
	// ReceiveRequestAttemptId would repeat, by ID: those of the last 5
	// minutes that handed out messages none of which was modified since
	// (deleted, its visibility changed, received again, moved). Each of
	// their messages names its receive's ID in its attempt field.
	attempts map[string]*attempt
}

// attempt is what a FIFO receive with a ReceiveRequestAttemptId handed out.
type attempt struct {
	msgs  []*message
	until time.Time // when the ID expires
}

type dedupEntry struct {
	id, seq string
	until   time.Time
}

// message is one message of a queue.
type message struct {
	id, body, md5Body string
	ordinal           uint64 // in its queue, from 1
	attrs             map[string]types.MessageAttributeValue
	traceHeader       string
	group, dedupID    string
	seq               string
	sent              time.Time
	// visibleAt is when the message becomes visible: after its delay
	// before its first receive, after its visibility timeout afterwards.
	visibleAt    time.Time
	receiveCount int
	firstReceive time.Time
	receivedAt   time.Time
	handle       string // of the latest receive
	deadLetterOf string // ARN of the queue it was moved from
	attempt      string // the ID of the receive holding it that a retry would repeat (see queue.attempts)
}

func (m *message) visible(now time.Time) bool  { return !now.Before(m.visibleAt) }
func (m *message) inFlight(now time.Time) bool { return m.receiveCount > 0 && now.Before(m.visibleAt) }
func (m *message) delayed(now time.Time) bool  { return m.receiveCount == 0 && now.Before(m.visibleAt) }

// intAttr returns an integer attribute, or def when it is not set or not a
// number.
func (q *queue) intAttr(name string, def int) int {
	if n, err := strconv.Atoi(q.attrs[name]); err == nil {
		return n
	}
	return def
}

// defaultRetention is a queue's MessageRetentionPeriod when not set: 4
// days, as on SQS.
const defaultRetention = 345600

// expire deletes the messages of q whose retention period has ended
// (MessageRetentionPeriod from their send), received or not, as SQS does.
// f.mu is held.
func (q *queue) expire(now time.Time) {
	ret := time.Duration(q.intAttr("MessageRetentionPeriod", defaultRetention)) * time.Second
	q.msgs = slices.DeleteFunc(q.msgs, func(m *message) bool {
		if now.Before(m.sent.Add(ret)) {
			return false
		}
		q.forgetMoved(m)
		return true
	})
}

// depth counts q's messages at now, once those past their retention period
// are deleted. f.mu is held.
func (q *queue) depth(now time.Time) (visible, inFlight, delayed int) {
	q.expire(now)
	for _, m := range q.msgs {
		switch {
		case m.inFlight(now):
			inFlight++
		case m.delayed(now):
			delayed++
		default:
			visible++
		}
	}
	return visible, inFlight, delayed
}

// nextChange returns how long until the next message of q becomes visible,
// or 0 when none is waiting to.
func (q *queue) nextChange(now time.Time) time.Duration {
	var next time.Duration
	for _, m := range q.msgs {
		if d := m.visibleAt.Sub(now); d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	return next
}

// nextSeq returns the next FIFO sequence number of q.
func (q *queue) nextSeq() string {
	q.seq++
	return strconv.FormatUint(10_000_000_000_000_000_000+q.seq, 10)
}

// receive takes up to max visible messages of q, moving to the dead-letter
// queue first those received maxReceiveCount times already, and makes them
// in flight for vis. f.mu is held.
//
// Standard queues hand out visible messages in the order they were sent. FIFO
// queues skip the groups with a message in flight, and take from each other
// group its visible messages in order, as many as fit, before going to the
// next group, as SQS does.
func (f *Fake) receive(q *queue, now time.Time, max int, vis time.Duration) []*message {
	q.expire(now)
	dlq, maxReceive := f.redrive(q)
	var got []*message
	moved := map[*message]bool{}
	take := func(m *message) {
		if dlq != nil && m.receiveCount >= maxReceive {
			f.moveToDLQ(q, dlq, m, now)
			moved[m] = true
			return
		}
		got = append(got, m)
	}
	if !q.fifo {
		for _, m := range q.msgs {
			if len(got) == max {
				break
			}
			if m.visible(now) {
				take(m)
			}
		}
	} else {
		done := map[string]bool{} // groups locked or already looked at
		for _, m := range q.msgs {
			if m.inFlight(now) {
				done[m.group] = true
			}
		}
		for i, m := range q.msgs {
			if len(got) == max {
				break
			}
			if done[m.group] {
				continue
			}
			done[m.group] = true
			for _, n := range q.msgs[i:] {
				if len(got) == max {
					break
				}
				if n.group != m.group {
					continue
				}
				if !n.visible(now) { // delayed: the rest of the group waits
					break
				}
				take(n)
			}
		}
	}
	if len(moved) > 0 {
		q.msgs = slices.DeleteFunc(q.msgs, func(m *message) bool { return moved[m] })
		f.notify()
	}
	for _, m := range got {
		q.forgetAttempt(m.attempt)
		m.receiveCount++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.handle = q.handle(m.ordinal, m.receiveCount)
		q.received[m.ordinal] = m
		m.receivedAt = now
		m.visibleAt = now.Add(vis)
	}
	return got
}

// receiveAttempt is receive for a FIFO receive with the
// ReceiveRequestAttemptId id. When a receive with id handed out messages less
// than DeduplicationInterval ago and none of them was modified since, it
// hands out the same messages again, with the same receipt handles and
// receive counts, in flight for vis from now. Otherwise it receives afresh,
// and a later receive with id repeats this one. f.mu is held.
func (f *Fake) receiveAttempt(q *queue, now time.Time, id string, max int, vis time.Duration) []*message {
	if a := q.attempts[id]; a != nil && now.Before(a.until) {
		for _, m := range a.msgs {
			m.visibleAt = now.Add(vis)
		}
		return a.msgs
	}
	q.forgetAttempt(id)
	got := f.receive(q, now, max, vis)
	if len(got) == 0 {
		return nil
	}
	for k, a := range q.attempts {
		if !now.Before(a.until) {
			q.forgetAttempt(k)
		}
	}
	q.attempts[id] = &attempt{msgs: got, until: now.Add(DeduplicationInterval)}
	for _, m := range got {
		m.attempt = id
	}
	return got
}

// forgetAttempt forgets the receive with the ReceiveRequestAttemptId id, if
// any: a receive with id is a new one. f.mu is held.
func (q *queue) forgetAttempt(id string) {
	if id == "" {
		return
	}
	if a := q.attempts[id]; a != nil {
		for _, m := range a.msgs {
			m.attempt = ""
		}
		delete(q.attempts, id)
	}
}

// moveToDLQ moves m from q to the end of dlq, keeping its ID, body,
// attributes, receive count and, on standard queues, sent timestamp, as SQS's
// redrive does. The caller removes m from q.msgs.
func (f *Fake) moveToDLQ(q, dlq *queue, m *message, now time.Time) {
	q.forgetMoved(m)
	c := &message{
		id: m.id, ordinal: dlq.nextOrdinal(), body: m.body, md5Body: m.md5Body, attrs: m.attrs, traceHeader: m.traceHeader,
		group: m.group, dedupID: m.dedupID, sent: m.sent, visibleAt: now,
		receiveCount: m.receiveCount, firstReceive: m.firstReceive, deadLetterOf: q.arn,
	}
	if dlq.fifo {
		c.seq = dlq.nextSeq()
		c.sent = now // FIFO queues reset the enqueue time
	}
	dlq.msgs = append(dlq.msgs, c)
}

// forgetMoved forgets m, moved out of q or expired: its receive, and any receipt
// handle of it (none of them is the latest of a deleted message). The
// caller removes m from q.msgs. f.mu is held.
func (q *queue) forgetMoved(m *message) {
	q.forgetAttempt(m.attempt)
	delete(q.received, m.ordinal)
	q.gone[m.ordinal] = 0
}

// attributeFilter says which system and message attributes a receive asked
// for.
type attributeFilter struct {
	allSystem bool
	system    map[string]bool
	allUser   bool
	user      []string // names, and prefixes ending in ".*"
}

func newAttributeFilter(in *sqs.ReceiveMessageInput) attributeFilter {
	a := attributeFilter{system: map[string]bool{}}
	for _, n := range in.MessageSystemAttributeNames {
		a.system[string(n)] = true
	}
	// The fake answers as SQS does, and SQS still honours the deprecated
	// field that older clients send.
	//lint:ignore SA1019 a fake of SQS must accept what SQS accepts
	for _, n := range in.AttributeNames {
		a.system[string(n)] = true
	}
	a.allSystem = a.system["All"]
	for _, n := range in.MessageAttributeNames {
		if n == "All" || n == ".*" {
			a.allUser = true
		}
		a.user = append(a.user, n)
	}
	return a
}

func (a attributeFilter) wantUser(name string) bool {
	if a.allUser {
		return true
	}
	for _, n := range a.user {
		if n == name || (strings.HasSuffix(n, ".*") && strings.HasPrefix(name, n[:len(n)-1])) {
			return true
		}
	}
	return false
}

// toSDK returns the message as ReceiveMessage returns it.
func (m *message) toSDK(q *queue, a attributeFilter) types.Message {
	out := types.Message{
		MessageId:     aws.String(m.id),
		ReceiptHandle: aws.String(m.handle),
		Body:          aws.String(m.body),
		MD5OfBody:     aws.String(m.md5Body),
	}
	sys := map[string]string{}
	add := func(name, value string) {
		if value != "" && (a.allSystem || a.system[name]) {
			sys[name] = value
		}
	}
	add("SenderId", Account)
	add("SentTimestamp", millis(m.sent))
	add("ApproximateReceiveCount", strconv.Itoa(m.receiveCount))
	add("ApproximateFirstReceiveTimestamp", millis(m.firstReceive))
	add("MessageGroupId", m.group)
	if q.fifo {
		add("SequenceNumber", m.seq)
		add("MessageDeduplicationId", m.dedupID)
	}
	add("AWSTraceHeader", m.traceHeader)
	add("DeadLetterQueueSourceArn", m.deadLetterOf)
	if len(sys) > 0 {
		out.Attributes = sys
	}
	for name, v := range m.attrs {
		if a.wantUser(name) {
			if out.MessageAttributes == nil {
				out.MessageAttributes = map[string]types.MessageAttributeValue{}
			}
			out.MessageAttributes[name] = copyAttribute(v)
		}
	}
	if len(out.MessageAttributes) > 0 {
		out.MD5OfMessageAttributes = aws.String(AttributesMD5(out.MessageAttributes))
	}
	return out
}

func millis(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

func copyAttribute(v types.MessageAttributeValue) types.MessageAttributeValue {
	c := types.MessageAttributeValue{
		DataType:         aws.String(aws.ToString(v.DataType)),
		BinaryValue:      slices.Clone(v.BinaryValue),
		StringListValues: slices.Clone(v.StringListValues),
	}
	if v.StringValue != nil {
		c.StringValue = aws.String(*v.StringValue)
	}
	for _, b := range v.BinaryListValues {
		c.BinaryListValues = append(c.BinaryListValues, slices.Clone(b))
	}
	return c
}

// sendRequest is one message to send, from SendMessage or an entry of
// SendMessageBatch.
type sendRequest struct {
	body     *string
	delay    int32
	attrs    map[string]types.MessageAttributeValue
	sysAttrs map[string]types.MessageSystemAttributeValue
	group    *string
	dedupID  *string
}

type sendResult struct {
	id, seq, md5Body, md5Attrs, md5Sys string
}

// send validates and enqueues one message. f.mu is held.
func (f *Fake) send(q *queue, r sendRequest) (sendResult, error) {
	now := f.now()
	if r.body == nil || *r.body == "" {
		return sendResult{}, missingParameter("MessageBody")
	}
	body := *r.body
	if i := invalidCharIndex(body); i >= 0 {
		return sendResult{}, &types.InvalidMessageContents{Message: aws.String(fmt.Sprintf(
			"Invalid binary character in the message body at byte %d: only #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF are allowed", i))}
	}
	size, err := validateAttributes(r.attrs)
	if err != nil {
		return sendResult{}, err
	}
	for name, v := range r.sysAttrs {
		if name != string(types.MessageSystemAttributeNameForSendsAWSTraceHeader) {
			return sendResult{}, invalidParameter("Message system attribute name '%s' is invalid.", name)
		}
		if aws.ToString(v.DataType) != "String" || aws.ToString(v.StringValue) == "" {
			return sendResult{}, invalidParameter("Message system attribute '%s' must be a non-empty String.", name)
		}
	}
	if limit := q.intAttr("MaximumMessageSize", 1048576); len(body)+size > limit {
		return sendResult{}, invalidParameter("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", limit)
	}
	if r.delay < 0 || r.delay > 900 {
		return sendResult{}, invalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: must be between 0 and 900, if provided.", r.delay)
	}
	m := &message{
		id: newMessageID(), body: body, md5Body: md5Hex([]byte(body)),
		sent: now, group: aws.ToString(r.group),
	}
	if len(r.attrs) > 0 {
		m.attrs = make(map[string]types.MessageAttributeValue, len(r.attrs))
		for k, v := range r.attrs {
			m.attrs[k] = copyAttribute(v)
		}
	}
	if th, ok := r.sysAttrs[string(types.MessageSystemAttributeNameForSendsAWSTraceHeader)]; ok {
		m.traceHeader = aws.ToString(th.StringValue)
	}
	res := sendResult{id: m.id, md5Body: m.md5Body}
	if len(m.attrs) > 0 {
		res.md5Attrs = AttributesMD5(m.attrs)
	}
	if len(r.sysAttrs) > 0 {
		res.md5Sys = systemAttributesMD5(r.sysAttrs)
	}
	if r.group != nil && !validGroupOrDedupID(*r.group) {
		return sendResult{}, invalidParameter("Value %s for parameter MessageGroupId is invalid. Reason: up to 128 alphanumeric or punctuation characters.", *r.group)
	}
	delay := int(r.delay)
	if !q.fifo {
		if r.dedupID != nil {
			return sendResult{}, invalidParameter("The request includes parameter MessageDeduplicationId that is not valid for this queue type.")
		}
		if delay == 0 {
			delay = q.intAttr("DelaySeconds", 0)
		}
		m.visibleAt = now.Add(time.Duration(delay) * time.Second)
		m.ordinal = q.nextOrdinal()
		q.msgs = append(q.msgs, m)
		f.notify()
		return res, nil
	}
	if r.group == nil {
		return sendResult{}, missingParameter("MessageGroupId")
	}
	if delay != 0 {
		return sendResult{}, invalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", delay)
	}
	switch {
	case r.dedupID != nil:
		if !validGroupOrDedupID(*r.dedupID) {
			return sendResult{}, invalidParameter("Value %s for parameter MessageDeduplicationId is invalid. Reason: up to 128 alphanumeric or punctuation characters.", *r.dedupID)
		}
		m.dedupID = *r.dedupID
	case q.attrs["ContentBasedDeduplication"] == "true":
		sum := sha256.Sum256([]byte(body))
		m.dedupID = hex.EncodeToString(sum[:])
	default:
		return sendResult{}, invalidParameter("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}
	if d, ok := q.dedup[m.dedupID]; ok && now.Before(d.until) {
		res.id, res.seq = d.id, d.seq // accepted, not delivered again
		return res, nil
	}
	for k, d := range q.dedup {
		if !now.Before(d.until) {
			delete(q.dedup, k)
		}
	}
	m.seq = q.nextSeq()
	res.seq = m.seq
	q.dedup[m.dedupID] = dedupEntry{id: m.id, seq: m.seq, until: now.Add(DeduplicationInterval)}
	m.visibleAt = now.Add(time.Duration(q.intAttr("DelaySeconds", 0)) * time.Second)
	m.ordinal = q.nextOrdinal()
	q.msgs = append(q.msgs, m)
	f.notify()
	return res, nil
}

// invalidCharIndex returns the index of the first character SQS does not
// allow in a message, or -1.
func invalidCharIndex(s string) int {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			// U+FFFD itself is allowed, an invalid encoding is not.
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return i
			}
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
		default:
			return i
		}
	}
	return -1
}

func validAttributeName(s string) bool {
	if s == "" || len(s) > 256 || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	lower := strings.ToLower(s)
	if strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// validateAttributes checks message attributes as SQS does and returns their
// size.
func validateAttributes(attrs map[string]types.MessageAttributeValue) (int, error) {
	if len(attrs) > 10 {
		return 0, invalidParameter("Number of message attributes [%d] exceeds the allowed maximum [10].", len(attrs))
	}
	size := 0
	for _, name := range sortedKeys(attrs) {
		v := attrs[name]
		if !validAttributeName(name) {
			return 0, invalidParameter("Message (user) attribute name '%s' is invalid.", name)
		}
		dt := aws.ToString(v.DataType)
		if dt == "" {
			return 0, invalidParameter("The message attribute '%s' must contain non-empty message attribute type.", name)
		}
		base, _, _ := strings.Cut(dt, ".")
		if len(dt) > 256 || (base != "String" && base != "Number" && base != "Binary") {
			return 0, invalidParameter("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", name)
		}
		if v.StringListValues != nil || v.BinaryListValues != nil {
			return 0, invalidParameter("Message attribute list values in SendMessage operation are not supported.")
		}
		size += len(name) + len(dt)
		switch base {
		case "Binary":
			if len(v.BinaryValue) == 0 {
				return 0, invalidParameter("The message attribute '%s' with type 'Binary' must use field 'Binary'.", name)
			}
			size += len(v.BinaryValue)
		default:
			s := aws.ToString(v.StringValue)
			if s == "" {
				return 0, invalidParameter("The message attribute '%s' must contain non-empty message attribute value for message attribute type '%s'.", name, base)
			}
			if base == "Number" {
				if _, err := strconv.ParseFloat(s, 64); err != nil {
					return 0, invalidParameter("Can't cast the value of message (user) attribute '%s' to a number.", name)
				}
			}
			if invalidCharIndex(s) >= 0 {
				return 0, invalidParameter("Message (user) attribute '%s' value contains invalid characters.", name)
			}
			size += len(s)
		}
	}
	return size, nil
}

func validGroupOrDedupID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return false
		}
	}
	return true
}

// AttributesMD5 returns the MD5 digest SQS computes of message attributes
// (MD5OfMessageAttributes): over the attributes sorted by name, each encoded
// as its name, data type, a transport byte (1 for strings and numbers, 2 for
// binaries) and value, the strings and byte slices each preceded by their
// length as 4 bytes, big-endian.
func AttributesMD5(attrs map[string]types.MessageAttributeValue) string {
	h := md5.New()
	put := func(b []byte) {
		n := len(b)
		h.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
		h.Write(b)
	}
	for _, name := range sortedKeys(attrs) {
		v := attrs[name]
		put([]byte(name))
		dt := aws.ToString(v.DataType)
		put([]byte(dt))
		if strings.HasPrefix(dt, "Binary") {
			h.Write([]byte{2})
			put(v.BinaryValue)
		} else {
			h.Write([]byte{1})
			put([]byte(aws.ToString(v.StringValue)))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func systemAttributesMD5(attrs map[string]types.MessageSystemAttributeValue) string {
	m := make(map[string]types.MessageAttributeValue, len(attrs))
	for k, v := range attrs {
		m[k] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	return AttributesMD5(m)
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// deleteMessage deletes the message whose latest receipt handle is h, and
// keeps no record of it unless it was received more than once. f.mu is held.
func (f *Fake) deleteMessage(q *queue, h string) error {
	m, deleted := q.lookup(h)
	switch {
	case deleted: // deleting twice succeeds, as on SQS
		return nil
	case m == nil:
		return receiptHandleInvalid(h)
	}
	q.forgetAttempt(m.attempt)
	delete(q.received, m.ordinal)
	if m.receiveCount > 1 {
		q.gone[m.ordinal] = int32(m.receiveCount)
	}
	q.msgs = slices.DeleteFunc(q.msgs, func(x *message) bool { return x == m })
	f.notify()
	return nil
}

// changeVisibility sets the visibility timeout of the in-flight message
// whose latest receipt handle is h. f.mu is held.
func (f *Fake) changeVisibility(q *queue, h string, secs int32) error {
	now := f.now()
	m, deleted := q.lookup(h)
	switch {
	case deleted:
		return invalidParameter("Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", h)
	case m == nil:
		return receiptHandleInvalid(h)
	case secs < 0 || secs > 43200:
		return invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200.", secs)
	case !m.inFlight(now):
		return &types.MessageNotInflight{Message: aws.String("The message referred to isn't in flight.")}
	}
	until := now.Add(time.Duration(secs) * time.Second)
	if until.Sub(m.receivedAt) > 12*time.Hour {
		return invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", secs)
	}
	q.forgetAttempt(m.attempt)
	m.visibleAt = until
	f.notify()
	return nil
}

// handleMAC is the length of a receipt handle's signature.
const handleMAC = 16

// handle returns the receipt handle of the count-th receive of the message
// of q with the given ordinal: both numbers, signed with q's key (HMAC-SHA256,
// cut to 16 bytes), base64url-encoded. Only q's own handles verify, and none
// of a queue deleted and created again.
func (q *queue) handle(ordinal uint64, count int) string {
	b := make([]byte, 12, 12+sha256.Size)
	binary.BigEndian.PutUint64(b, ordinal)
	binary.BigEndian.PutUint32(b[8:], uint32(count))
	mac := hmac.New(sha256.New, q.key)
	mac.Write(b)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(b)[:12+handleMAC])
}

// lookup returns the message whose latest receipt handle is h, or reports
// that h is the latest handle of a message deleted. Neither when h is not a
// handle of q, an earlier receive's, or a moved message's. f.mu is held.
func (q *queue) lookup(h string) (m *message, deleted bool) {
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil || len(b) != 12+handleMAC {
		return nil, false
	}
	mac := hmac.New(sha256.New, q.key)
	mac.Write(b[:12])
	if !hmac.Equal(mac.Sum(nil)[:handleMAC], b[12:]) {
		return nil, false
	}
	ordinal, count := binary.BigEndian.Uint64(b), int32(binary.BigEndian.Uint32(b[8:]))
	if m := q.received[ordinal]; m != nil {
		if int32(m.receiveCount) != count {
			return nil, false // received again since
		}
		return m, false
	}
	last, ok := q.gone[ordinal]
	if !ok {
		last = 1 // deleted after its first receive, unrecorded
	}
	return nil, count == last
}

// nextOrdinal gives out the ordinal of a new message of q.
func (q *queue) nextOrdinal() uint64 {
	q.ordinals++
	return q.ordinals
}

func receiptHandleInvalid(h string) error {
	return &types.ReceiptHandleIsInvalid{Message: aws.String(fmt.Sprintf("The input receipt handle %q is not a valid receipt handle.", h))}
}

func queueDoesNotExist() error {
	return &types.QueueDoesNotExist{Message: aws.String("The specified queue does not exist.")}
}

func invalidParameter(format string, args ...any) error {
	return &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: fmt.Sprintf(format, args...), Fault: smithy.FaultClient}
}

func missingParameter(name string) error {
	return &smithy.GenericAPIError{Code: "MissingParameter", Message: "The request must contain the parameter " + name + ".", Fault: smithy.FaultClient}
}
