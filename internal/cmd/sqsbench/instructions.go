package main

// The instruction count (-instructions): the CPU cost of each consumer as
// the instructions its process executes, counted by valgrind's cachegrind.
// Unlike CPU seconds, the count does not move with what else the machine
// is doing: on these shared machines, one consumer's CPU seconds spread by
// more than the 10% between the worker and the raw loop that issue 14 asks
// to tell apart, while its instruction count repeats within 1 to 3%.
//
// Each child runs under cachegrind (--cache-sim=no: instructions only) with
// GOMAXPROCS=1 and GODEBUG=asyncpreemptoff=1. Valgrind runs one thread at a
// time; with a second P the Go scheduler's idle spinning, whose length
// depends on timing, was seen adding 29% to one run. Preemption signals are
// timed too, and callgrind aborted on them. The count covers the whole
// process, start-up and shutdown included, like the CPU seconds of the
// comparison, in user space only (the kernel's work for a consumer's
// connections and wake-ups is not in it), and is split by where the
// instructions ran: the module's own code, the AWS SDK, the Go runtime's
// garbage collector and stack work (marking, write barriers, sweeping;
// scanning, growing and shrinking goroutine stacks), its allocator, the
// rest of the runtime (scheduler, timers, locks), and the rest (the
// standard library's HTTP, the crypto of signing and checksums, maps,
// copies).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Where instructions ran; see classify.
const (
	classOwn = iota
	classSDK
	classGC
	classAlloc
	classRuntime
	classRest
	nClasses
)

var classNames = [nClasses]string{"sqsworker", "AWS SDK", "GC and stacks", "allocator", "rest of runtime", "rest"}

// counted is the instructions of one run, in all and by class.
type counted struct {
	total   uint64
	classes [nClasses]uint64
	res     result
}

func instructions(ctx context.Context, c *sqs.Client, s settings, child string) error {
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		return fmt.Errorf("-instructions needs valgrind (Debian's valgrind package; make bench-instructions installs it): %w", err)
	}
	dir := s.instrKeep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "sqsbench-cachegrind-")
		if err != nil {
			return fmt.Errorf("temporary directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-instructions-keep: %w", err)
	}
	consumers := consumerList(s, true)
	n := s.instrMessages
	runs := make([][]counted, len(consumers))
	for rep := range s.instrReps {
		for k := range consumers {
			ci := (k + rep) % len(consumers)
			cons := consumers[ci]
			out := filepath.Join(dir, fmt.Sprintf("%s-%d.out", fileName(cons.name), rep))
			command := []string{"env", "GOMAXPROCS=1", "GODEBUG=" + godebug(s.childEnv, "asyncpreemptoff=1"),
				valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=" + out, "--log-file=" + out + ".log", child}
			r, err := runChild(ctx, c, s, command, cons.name, n, cons.args, 0, nil)
			if err != nil {
				return fmt.Errorf("%s under cachegrind, %d messages: %w; valgrind's log:\n%s", cons.name, n, err, valgrindLog(out+".log"))
			}
			cnt, err := readCachegrind(out)
			if err != nil {
				return fmt.Errorf("%s: %w; valgrind's log:\n%s", cons.name, err, valgrindLog(out+".log"))
			}
			cnt.res = r
			runs[ci] = append(runs[ci], cnt)
			fmt.Fprintf(os.Stderr, "instructions rep %d/%d %6d msgs  %-32s %7.1fk instructions/msg, %.4f req/msg\n",
				rep+1, s.instrReps, n, cons.name, perMsg(cnt.total, n)/1000, r.perMessage())
		}
	}

	fmt.Printf("Instructions per message, whole process, user space (cachegrind, GOMAXPROCS=1), %d messages, median of %d runs (min–max); × raw: the median of each run's ratio to the raw loop's run of the same repetition. Then where they ran, thousands per message, the median of each class over the runs.\n\n", n, s.instrReps)
	fmt.Print("| consumer | instructions / msg | × raw | × raw, all attributes | × raw, deletes beside | SQS requests/msg |")
	for _, name := range classNames {
		fmt.Printf(" %s |", name)
	}
	fmt.Print("\n|---|---:|---:|---:|---:|---:|")
	for range classNames {
		fmt.Print("---:|")
	}
	fmt.Println()
	all, beside := consumerIndex(consumers, nameAllAttrs), consumerIndex(consumers, nameBeside)
	for ci, cons := range consumers {
		rs := runs[ci]
		thousands := each(rs, func(r counted) float64 { return perMsg(r.total, n) / 1000 })
		fmt.Printf("| %s | %s | %s | %s | %s | %s |", cons.name, spread(thousands, "%.1fk"),
			spread(instrRatios(rs, runs[0]), "%.3f"), spread(instrRatios(rs, runs[all]), "%.3f"), spread(instrRatios(rs, runs[beside]), "%.3f"),
			spread(each(rs, func(r counted) float64 { return r.res.perMessage() }), "%.4f"))
		for k := range nClasses {
			fmt.Printf(" %.1f |", median(each(rs, func(r counted) float64 { return perMsg(r.classes[k], n) }))/1000)
		}
		fmt.Println()
	}
	fmt.Printf("\n- worker, heartbeat on: %.3f× the raw loop's instructions per message (issue 14's target for CPU: ≤ 1.10), %.3f× the raw loop's that receives every attribute, as the worker does, %.3f× the raw loop's that also deletes beside its receives, as the worker does\n\n",
		median(instrRatios(runs[1], runs[0])), median(instrRatios(runs[1], runs[all])), median(instrRatios(runs[1], runs[beside])))
	return nil
}

// godebug is the GODEBUG of a child run under valgrind: base, then the
// settings of a GODEBUG in env (-child-env), which win where both set one.
func godebug(env []string, base string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok && v != "" {
			base += "," + v
		}
	}
	return base
}

// fileName turns a consumer's name into a file name: its letters and
// digits, each run of other characters a dash.
func fileName(name string) string {
	f := strings.FieldsFunc(name, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') })
	return strings.Join(f, "-")
}

func perMsg(x uint64, n int) float64 { return float64(x) / float64(n) }

func instrRatios(rs, base []counted) []float64 {
	out := make([]float64, len(rs))
	for i := range rs {
		out[i] = float64(rs[i].total) / float64(base[i].total)
	}
	return out
}

// readCachegrind sums a cachegrind output file's instruction counts by
// class. The format: "fl=" names a source file, "fn=" a function, and each
// line of numbers that follows is a source line and its counts, the
// instructions first (the only event with --cache-sim=no, unless
// VALGRIND_OPTS adds some). Code inlined into a function comes under the
// inlined code's file with the function's name again, so a function is
// classed once, by the file that holds most of its instructions.
func readCachegrind(file string) (counted, error) {
	var c counted
	f, err := os.Open(file)
	if err != nil {
		return c, fmt.Errorf("reading cachegrind's output: %w", err)
	}
	defer f.Close()
	type key struct{ fn, fl string }
	byFile := map[key]uint64{}
	var fl, fn string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "fl="):
			fl = line[3:]
		case strings.HasPrefix(line, "fn="):
			fn = line[3:]
		case line != "" && line[0] >= '0' && line[0] <= '9':
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			x, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return c, fmt.Errorf("cachegrind's output %s: line %q: %w", file, line, err)
			}
			byFile[key{fn, fl}] += x
			c.total += x
		}
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("reading cachegrind's output: %w", err)
	}
	if c.total == 0 {
		return c, errors.New("cachegrind counted no instructions")
	}
	type share struct {
		total, most uint64
		file        string
	}
	fns := map[string]*share{}
	for k, x := range byFile {
		sh := fns[k.fn]
		if sh == nil {
			sh = &share{}
			fns[k.fn] = sh
		}
		sh.total += x
		if x > sh.most || x == sh.most && k.fl < sh.file {
			sh.most, sh.file = x, k.fl
		}
	}
	for name, sh := range fns {
		c.classes[classify(sh.file, name)] += sh.total
	}
	return c, nil
}

// valgrindLog returns the end of valgrind's log file, for an error.
func valgrindLog(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return "(none: " + err.Error() + ")"
	}
	return tail(string(b), 2000)
}

// allocating names runtime functions that allocate, whose files (mbitmap.go,
// mheap.go) are otherwise the collector's.
var allocating = []string{"malloc", "newobject", "newarray", "makeslice", "(*mcache)", "(*mcentral)",
	"writeHeapBits", "heapSetType", "nextFree", "allocSpan", "(*mheap).alloc", "(*mspan).init", "refill"}

// classify says where a function's instructions ran, from its name and the
// base name of the source file that holds most of them.
func classify(file, fn string) int {
	const module = "github.com/sqsworker/sqsworker"
	switch {
	case strings.HasPrefix(fn, module+"/internal/cmd/"):
		return classRest // the benchmark's own child
	case strings.HasPrefix(fn, module+".") || strings.HasPrefix(fn, module+"/"):
		return classOwn
	case strings.HasPrefix(fn, "github.com/aws/"):
		return classSDK
	case strings.Contains(fn, "gcWriteBarrier"):
		return classGC
	case !strings.HasPrefix(fn, "runtime."):
		return classRest // maps, copies and hashing are the callers' work
	}
	for _, a := range allocating {
		if strings.Contains(fn, a) {
			return classAlloc
		}
	}
	base := path.Base(file)
	switch {
	case strings.HasPrefix(base, "mgc"),
		base == "mbitmap.go", base == "mwbbuf.go", base == "mspanset.go", base == "mheap.go",
		base == "symtab.go", base == "stack.go", base == "stkframe.go", base == "traceback.go":
		return classGC
	case base == "malloc.go", base == "mcache.go", base == "mcentral.go", base == "msize.go", base == "mfixalloc.go":
		return classAlloc
	case base == "memmove_amd64.s", base == "memclr_amd64.s", base == "asm_amd64.s" && strings.Contains(fn, "hash"):
		return classRest
	}
	return classRuntime
}
