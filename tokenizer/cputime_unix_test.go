//go:build unix

package tokenizer

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time, so a benchmark can report
// throughput per CPU-second, which a machine shared with other jobs does
// not distort the way it distorts wall time.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
