//go:build !unix

package lambda_test

import "time"

// processCPU is not measured on this system: benchmarks report 0.
func processCPU() time.Duration { return 0 }
