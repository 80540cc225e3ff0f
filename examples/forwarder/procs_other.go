//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import "time"

// processCPU cannot read the process's CPU time here: -procs auto keeps
// the runtime's count.
func processCPU() (time.Duration, bool) { return 0, false }
