//go:build !linux

package fakecu

// threadID is 0 where the fake cannot tell threads apart: every thread
// then shares one current context.
func threadID() int { return 0 }
