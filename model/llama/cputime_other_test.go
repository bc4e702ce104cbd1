//go:build !unix

package llama

import "time"

func cpuTime() time.Duration { return 0 }
