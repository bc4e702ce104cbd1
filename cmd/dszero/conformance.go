package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/dszero/dszero/conformance"
)

// runConformance is `dszero conformance DIR... [--json OUT] [--only
// PATTERN]`: every reference case under the directories, trained by
// dszero on the case's world size and compared with what DeepSpeed
// recorded. Exit 0 when every case with a reference result passes, 1 when
// one does not, 2 on usage errors.
func runConformance(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("dszero conformance", stderr)
	jsonOut := fs.String("json", "", "also write every case's report as JSON to this file (- for stdout, instead of the table)")
	only := fs.String("only", "", "run only the cases whose name (e.g. gpt/z3_bf16) matches this glob or contains this text")
	// Flags may follow the directories.
	var dirs []string
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		dirs, args = append(dirs, fs.Arg(0)), fs.Args()[1:]
	}
	if len(dirs) == 0 {
		fmt.Fprintln(stderr, "dszero conformance: give the directories to find cases in (a case is a directory with a result.json), e.g. conformance/testdata")
		return 2
	}
	if *only != "" {
		if _, err := path.Match(*only, ""); err != nil {
			fmt.Fprintf(stderr, "dszero conformance: --only %q: %v\n", *only, err)
			return 2
		}
	}
	cases, err := conformance.Find(dirs...)
	if err != nil {
		fmt.Fprintf(stderr, "dszero conformance: %v\n", err)
		return 2
	}
	var picked []conformance.Case
	for _, c := range cases {
		if *only == "" || strings.Contains(c.Name, *only) || matches(*only, c.Name) {
			picked = append(picked, c)
		}
	}
	if len(picked) == 0 {
		fmt.Fprintf(stderr, "dszero conformance: no case matches --only %q (of %d found)\n", *only, len(cases))
		return 2
	}
	reps := make([]conformance.Report, 0, len(picked))
	for _, c := range picked {
		reps = append(reps, conformance.Run(c))
	}
	if *jsonOut != "-" {
		if err := conformance.WriteTable(stdout, reps); err != nil {
			fmt.Fprintf(stderr, "dszero conformance: %v\n", err)
			return 1
		}
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(struct {
			Passed bool                 `json:"passed"`
			Cases  []conformance.Report `json:"cases"`
		}{conformance.Passed(reps), reps}, "", "  ")
		if err == nil {
			b = append(b, '\n')
			if *jsonOut == "-" {
				_, err = stdout.Write(b)
			} else {
				err = os.WriteFile(*jsonOut, b, 0o644)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "dszero conformance: --json: %v\n", err)
			return 1
		}
	}
	if !conformance.Passed(reps) {
		return 1
	}
	return 0
}

// matches says the glob matches the case's name or its last element.
func matches(glob, name string) bool {
	ok, _ := path.Match(glob, name)
	base, _ := path.Match(glob, path.Base(name))
	return ok || base
}
