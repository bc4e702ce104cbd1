package fakecu

import "syscall"

// threadID identifies the calling OS thread: CUDA's current context is
// per thread, and the fake checks it per thread too.
func threadID() int { return syscall.Gettid() }
