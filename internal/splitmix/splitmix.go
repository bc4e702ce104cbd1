// Package splitmix is the splitmix64 generator's arithmetic, shared by the
// counter-based initialization (package model) and the random benchmark
// corpus (package data): element i of a stream is Mix(key + i·Golden).
package splitmix

// Golden is splitmix64's increment, 2^64/φ.
const Golden = 0x9e3779b97f4a7c15

// Mix is splitmix64's output function (Stafford's mix13 variant).
func Mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
