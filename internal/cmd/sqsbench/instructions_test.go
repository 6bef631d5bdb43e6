package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadCachegrindSumsByClass(t *testing.T) {
	const out = `desc: I1 cache:         32768 B, 64 B, 8-way associative
cmd: /tmp/child -mode worker
events: Ir
fl=/src/worker/pool.go
fn=github.com/sqsworker/sqsworker/worker.(*pool).grantLocked
12 100
13 50
fl=/go/src/runtime/mgcmark.go
fn=runtime.scanstack
1 1000
fl=/go/src/runtime/symtab.go
fn=runtime.scanstack
2 10
fn=runtime.pcvalue
5 200
fl=/go/src/runtime/malloc.go
fn=runtime.mallocgc
3 300
fl=/go/src/runtime/mbitmap.go
fn=runtime.(*mspan).writeHeapBitsSmall
9 20
fl=/go/src/runtime/asm_amd64.s
fn=runtime.gcWriteBarrier2
10 5
fl=/go/src/runtime/proc.go
fn=runtime.schedule
4 40
fl=/mod/github.com/aws/smithy-go/json/parser.go
fn=github.com/aws/smithy-go/transport/http/protocol/internal/json.(*parser).Next
6 60
fl=/go/src/net/http/transport.go
fn=net/http.(*persistConn).readLoop
7 7
fl=/src/internal/cmd/sqsbench/child/main.go
fn=main.run
8 3
summary: 1795
`
	file := filepath.Join(t.TempDir(), "cachegrind.out")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := readCachegrind(file)
	if err != nil {
		t.Fatal(err)
	}
	if c.total != 1795 {
		t.Errorf("total %d, want 1795 (the file's summary)", c.total)
	}
	want := [nClasses]uint64{classOwn: 150, classSDK: 60, classGC: 1215, classAlloc: 320, classRuntime: 40, classRest: 10}
	if c.classes != want {
		t.Errorf("classes %v, want %v", c.classes, want)
	}
}

func TestReadCachegrindRefusesAnEmptyCount(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cachegrind.out")
	if err := os.WriteFile(file, []byte("events: Ir\nsummary: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readCachegrind(file); err == nil || !strings.Contains(err.Error(), "no instructions") {
		t.Fatalf("err %v, want one saying cachegrind counted no instructions", err)
	}
}

func TestFileName(t *testing.T) {
	if got, want := fileName("raw SDK loop (8 goroutines)"), "raw-SDK-loop-8-goroutines"; got != want {
		t.Errorf("fileName = %q, want %q", got, want)
	}
	if got, want := fileName("worker, heartbeat on"), "worker-heartbeat-on"; got != want {
		t.Errorf("fileName = %q, want %q", got, want)
	}
}

func TestGodebugJoinsTheChildEnv(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "asyncpreemptoff=1"},
		{[]string{"GOGC=400"}, "asyncpreemptoff=1"},
		{[]string{"GODEBUG=gcshrinkstackoff=1", "GOGC=400"}, "asyncpreemptoff=1,gcshrinkstackoff=1"},
		{[]string{"GODEBUG="}, "asyncpreemptoff=1"},
	} {
		if got := godebug(c.env, "asyncpreemptoff=1"); got != c.want {
			t.Errorf("godebug(%q) = %q, want %q", c.env, got, c.want)
		}
	}
}
