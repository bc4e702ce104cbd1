//go:build !unix

package gpt

import "time"

func cpuTime() time.Duration { return 0 }
