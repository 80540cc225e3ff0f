//go:build !unix

package main

import "time"

// cpuTime is not measured here; the benchmark's cpu-ns/op reads 0.
func cpuTime() time.Duration { return 0 }
