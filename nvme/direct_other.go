//go:build !linux

package nvme

import "runtime"

// oDirect is 0 where dszero does not use O_DIRECT: I/O is buffered.
const oDirect = 0

const noDirectReason = "O_DIRECT is used on Linux only; " + runtime.GOOS + " does buffered I/O"
