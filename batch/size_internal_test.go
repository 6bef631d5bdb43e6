package batch

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// itemSize is the size DynamoDB bills and limits an item by, by its
// documented rules: each attribute's name in UTF-8 bytes plus its value; a
// string its UTF-8 bytes; a number one byte per two significant digits,
// plus one; a set the sum of its elements; a boolean or null one byte. (Lists
// and maps, which batch items do not hold, are left out.)
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			n += numSize(v.Value)
		case *types.AttributeValueMemberNS:
			for _, e := range v.Value {
				n += numSize(e)
			}
		case *types.AttributeValueMemberSS:
			for _, e := range v.Value {
				n += len(e)
			}
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
			n++
		default:
			panic("itemSize: unexpected attribute type " + name)
		}
	}
	return n
}

// numSize is the size of a number: one byte per two significant digits
// (leading and trailing zeros trimmed), plus one.
func numSize(s string) int {
	s = strings.TrimLeft(s, "-")
	s = strings.ReplaceAll(s, ".", "")
	s = strings.Trim(s, "0")
	return (len(s)+1)/2 + 1
}

// maxBatchItemSize bounds the batch's item, whatever its failures: the
// package documentation (Cost) states it.
const maxBatchItemSize = 8 << 10

// worstBatchItem returns the largest item a batch can have, by the
// attributes each write of the package adds to it: an ID of MaxIDLength,
// queue URLs of 256 bytes, counters of up to total chunks (math.MaxInt32,
// more than a Spec can hold in memory), failed indexes of as many digits, as
// many as failedCap allows, and the completion's state. listed is the number
// of failed indexes.
func worstBatchItem(keyAttr, expiryAttr string, listed int) map[string]types.AttributeValue {
	c := &Coordinator{cfg: Config{KeyAttr: keyAttr, ExpiryAttr: expiryAttr, TTL: DefaultTTL}, failedCap: MaxFailedIndexes}
	url := "https://sqs.ap-southeast-2.amazonaws.com/123456789012/" + strings.Repeat("q", 256-55)
	s := Spec{ID: strings.Repeat("i", MaxIDLength), QueueURL: url, Callback: Callback{QueueURL: url}}
	now := time.Date(2286, 11, 20, 17, 46, 39, 999e6, time.UTC) // 13 digits of epoch ms
	total := int64(math.MaxInt32)
	item := c.batchItem(s, int(total), strings.Repeat("f", 64), now)
	// Counting (countWrites), failing (failureWrites), Create's mark.
	item[aDone] = num(total - 1)
	item[aFailed] = num(total - 1)
	item[aSent] = num(now.UnixMilli())
	if listed > 0 {
		idx := make([]string, listed)
		for j := range idx {
			idx[j] = strconv.FormatInt(total-1-int64(j), 10)
		}
		item[aFailedSet] = &types.AttributeValueMemberNS{Value: idx}
	}
	// The completion (notify, markSent): its lease, then its mark.
	item[aNotifyTok] = str(newToken())
	item[aNotifyTill] = num(now.UnixMilli())
	item["notify_chunk"] = num(total - 1)
	item[aNotified] = num(now.UnixMilli())
	item[aNotifyID] = str(strings.Repeat("m", 100))
	return item
}

// The batch's item stays small whatever the failures: its failed_chunks
// lists at most MaxFailedIndexes indexes. The documentation's figures hold
// for the largest item the package writes (the tests on DynamoDB Local check
// that the items it writes have no attribute this one lacks).
func TestBatchItemSizeBounded(t *testing.T) {
	empty := itemSize(worstBatchItem("id", "expiry", 0))
	full := itemSize(worstBatchItem("id", "expiry", MaxFailedIndexes))
	t.Logf("the largest batch item: %d bytes without failures, %d with %d failed chunks listed (a transactional write costs 2 units per KB begun: %d and %d)",
		empty, full, MaxFailedIndexes, 2*((empty+1023)/1024), 2*((full+1023)/1024))
	if empty > 2<<10 {
		t.Errorf("the batch's item without failures is %d bytes, over the documented 2 KB", empty)
	}
	if full > maxBatchItemSize {
		t.Errorf("the batch's item with a full list of failed chunks is %d bytes, over the documented %d", full, maxBatchItemSize)
	}
	// What the cap prevents: a set of every failure reaches DynamoDB's
	// 400 KB limit well within a batch's possible size.
	unbounded := itemSize(worstBatchItem("id", "expiry", 100_000))
	if unbounded < 400<<10 {
		t.Errorf("100,000 listed failures make an item of %d bytes, under 400 KB: the test's model is off", unbounded)
	}
	// Realistic: a batch of under a million chunks.
	idx := make([]string, MaxFailedIndexes)
	for j := range idx {
		idx[j] = strconv.Itoa(999_999 - j)
	}
	set := itemSize(map[string]types.AttributeValue{aFailedSet: &types.AttributeValueMemberNS{Value: idx}})
	t.Logf("a full list of 6-digit indexes: %d bytes", set)
}

func TestNumSize(t *testing.T) {
	for s, want := range map[string]int{"0": 1, "7": 2, "10": 2, "123": 3, "1234": 3, "-12345": 4, "2147483646": 6, "1.50": 2} {
		if got := numSize(s); got != want {
			t.Errorf("numSize(%s) = %d, want %d", s, got, want)
		}
	}
}
