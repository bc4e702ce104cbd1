package ptfile

import (
	"errors"
	"fmt"
)

// Error is what every read of a file returns on failure: the file, the
// archive entry at fault ("" for the archive as a whole) and what is
// wrong. When an Options field would accept the file — an allow-listed
// class, a higher limit — Option names it and Hint says how in Go, for
// callers that pass Options through; a program whose users cannot set
// Options shows Message instead, which leaves the Go out.
type Error struct {
	File  string
	Entry string
	Err   error
	// Option is the Options field that would change the outcome
	// ("Classes", "DeepSpeed", "MaxValues", "MaxPickleBytes"), or "".
	Option string
	// Hint is the Go that sets it, e.g. `Options.Classes =
	// []string{"argparse.Namespace"} keeps it as an opaque Object`.
	Hint string
}

func (e *Error) Error() string {
	if e.Hint == "" {
		return e.Message()
	}
	return e.Message() + "; " + e.Hint
}

// Message is the error without the Go hint.
func (e *Error) Message() string {
	if e.Entry != "" {
		return fmt.Sprintf("ptfile: %s: %s: %v", e.File, e.Entry, e.Err)
	}
	return fmt.Sprintf("ptfile: %s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrChecksum says an entry's bytes are not the bytes its archive recorded
// (their CRC-32 differs): the file was corrupted after it was written.
var ErrChecksum = errors.New("CRC-32 checksum mismatch")

// refusal is a read stopped by the allow-list or by a limit that an
// Options field sets: the message for anyone, and the option and Go hint
// that *Error carries separately.
type refusal struct {
	msg    string
	option string
	hint   string
}

func (r *refusal) Error() string { return r.msg }

// fileError makes err, which happened reading entry of f, an *Error,
// lifting a refusal's option and hint out of the message.
func (f *File) fileError(entry string, err error) *Error {
	e := &Error{File: f.Name, Entry: entry, Err: err}
	var r *refusal
	if errors.As(err, &r) {
		e.Option, e.Hint = r.option, r.hint
	}
	return e
}

func (f *File) errorf(entry, format string, args ...any) *Error {
	return f.fileError(entry, fmt.Errorf(format, args...))
}
