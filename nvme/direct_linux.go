//go:build linux

package nvme

import "syscall"

// oDirect is the open flag that bypasses the page cache.
const oDirect = syscall.O_DIRECT

const noDirectReason = ""
