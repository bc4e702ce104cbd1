// Package llama is the Llama decoder family, forward and backward by
// hand on a flat parameter buffer.
package llama
