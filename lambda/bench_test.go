package lambda_test

import (
	"context"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
)

// BenchmarkAdapterBatch10 measures the adapter's overhead per record for
// batches of ten successful records: conversion, dispatch, handler call and
// response, with the heartbeat on (its extender starts and stops with each
// invocation) and off. The queue's attributes are read once, before timing.
// Run with `go test -run '^$' -bench Adapter -benchmem ./lambda`; cpu-ns/record
// is the process's CPU time per record, steadier than the wall time on a
// shared machine.
func BenchmarkAdapterBatch10(b *testing.B) {
	for _, heartbeat := range []bool{true, false} {
		name := "heartbeat"
		if !heartbeat {
			name = "no-heartbeat"
		}
		b.Run(name, func(b *testing.B) {
			f := newFake("30")
			ok := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
			fn, err := lambda.NewHandler(ok, lambda.Config{Client: f, Logger: quiet, DisableHeartbeat: !heartbeat})
			if err != nil {
				b.Fatal(err)
			}
			bodies := make([]string, 10)
			for i := range bodies {
				bodies[i] = "ok"
			}
			ev := received(b, f, "orders", bodies...)
			if _, err := fn(context.Background(), ev); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for range b.N {
				if _, err := fn(context.Background(), ev); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*10), "ns/record")
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N*10), "cpu-ns/record")
		})
	}
}
