package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// build is what the binary knows about itself (runtime/debug.BuildInfo).
type build struct {
	Version  string   `json:"version"` // the module version, "(devel)" for a build from a checkout
	Commit   string   `json:"commit,omitempty"`
	Time     string   `json:"commit_time,omitempty"`
	Modified bool     `json:"modified,omitempty"` // built from a checkout with uncommitted changes
	Go       string   `json:"go"`
	Platform string   `json:"platform"`
	Cgo      bool     `json:"cgo"`
	Tags     []string `json:"tags"`
	MPI      bool     `json:"mpi"` // built with the Open MPI backend (-tags mpi)
}

func readBuild() build {
	b := build{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, MPI: mpiBuilt, Tags: []string{}}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version = info.Main.Version
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "CGO_ENABLED":
			b.Cgo = s.Value == "1"
		case "-tags":
			b.Tags = strings.Split(s.Value, ",")
		}
	}
	return b
}

// String is the one line of dszero version.
func (b build) String() string {
	s := "dszero " + b.Version
	if b.Commit != "" {
		s += " commit " + b.Commit[:min(12, len(b.Commit))]
		if b.Time != "" {
			s += " (" + b.Time + ")"
		}
		if b.Modified {
			s += " with local changes"
		}
	}
	s += fmt.Sprintf(", %s %s", b.Go, b.Platform)
	if b.Cgo {
		s += ", cgo"
	} else {
		s += ", no cgo"
	}
	if len(b.Tags) > 0 {
		s += ", tags " + strings.Join(b.Tags, ",")
	}
	return s
}

// runVersion is dszero version (and --version).
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero version", stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dszero version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fmt.Fprintln(stdout, readBuild())
	return 0
}
