package dsconfig

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/dszero/dszero/dsconfig/lenient"
)

// Severity says what a diagnostic means for the run.
type Severity int

const (
	// Error: DeepSpeed would reject the config (or dszero refuses a value
	// that DeepSpeed would silently mangle). The plan is not usable.
	Error Severity = iota
	// Warning: DeepSpeed accepts the config but something in it does not do
	// what it looks like (an ignored key, a deprecated spelling, an "auto"
	// that falls back to a default).
	Warning
	// Unsupported: DeepSpeed accepts the config, but it asks for a feature
	// that dszero does not run yet. `config check` passes; `train` refuses.
	Unsupported
	// Info: a note about how a value was resolved.
	Info
)

func (s Severity) String() string {
	switch s {
	case Error:
		return "error"
	case Warning:
		return "warning"
	case Unsupported:
		return "unsupported"
	case Info:
		return "info"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// MarshalText writes the severity's name (for --json).
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Diagnostic is one finding about a config, located by file, position and
// JSON path.
type Diagnostic struct {
	Severity Severity    `json:"severity"`
	File     string      `json:"file,omitempty"`
	Pos      lenient.Pos `json:"-"`
	Line     int         `json:"line,omitempty"`
	Col      int         `json:"col,omitempty"`
	Path     string      `json:"path,omitempty"` // JSON path, e.g. zero_optimization.offload_param.device
	Msg      string      `json:"message"`
	Fix      string      `json:"fix,omitempty"` // what to change
}

// String formats the diagnostic as `file:line:col: path: severity: message; fix`.
func (d Diagnostic) String() string {
	var b strings.Builder
	if d.File != "" {
		b.WriteString(d.File)
		if d.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", d.Line, d.Col)
		}
		b.WriteString(": ")
	}
	if d.Path != "" {
		b.WriteString(d.Path)
		b.WriteString(": ")
	}
	b.WriteString(d.Severity.String())
	b.WriteString(": ")
	b.WriteString(d.Msg)
	if d.Fix != "" {
		b.WriteString("; ")
		b.WriteString(d.Fix)
	}
	return b.String()
}

// Diagnostics is an ordered list of findings.
type Diagnostics []Diagnostic

// Count returns how many diagnostics have severity s.
func (ds Diagnostics) Count(s Severity) int {
	n := 0
	for _, d := range ds {
		if d.Severity == s {
			n++
		}
	}
	return n
}

// HasErrors reports whether any diagnostic is an Error.
func (ds Diagnostics) HasErrors() bool { return ds.Count(Error) > 0 }

// Filter returns the diagnostics of severity s.
func (ds Diagnostics) Filter(s Severity) Diagnostics {
	var out Diagnostics
	for _, d := range ds {
		if d.Severity == s {
			out = append(out, d)
		}
	}
	return out
}

// Sorted orders diagnostics by position (unpositioned last), keeping the
// order of discovery for equal positions.
func (ds Diagnostics) Sorted() Diagnostics {
	out := append(Diagnostics(nil), ds...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Line == 0) != (b.Line == 0) {
			return a.Line != 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return out
}

// ConfigError is returned when a config has errors. It carries every
// diagnostic, errors and warnings alike.
type ConfigError struct {
	File  string
	Diags Diagnostics
}

func (e *ConfigError) Error() string {
	errs := e.Diags.Filter(Error)
	if len(errs) == 0 {
		return fmt.Sprintf("%s: invalid config", e.File)
	}
	var b strings.Builder
	b.WriteString(errs[0].String())
	if len(errs) > 1 {
		fmt.Fprintf(&b, " (and %d more error", len(errs)-1)
		if len(errs) > 2 {
			b.WriteString("s")
		}
		b.WriteString(")")
	}
	return b.String()
}

// sink collects diagnostics for one file.
type sink struct {
	file  string
	diags Diagnostics
}

func (s *sink) add(sev Severity, v *lenient.Value, path, msg, fix string) {
	d := Diagnostic{Severity: sev, File: s.file, Path: clipPath(path), Msg: msg, Fix: fix}
	if v != nil {
		d.Pos = v.Pos
		d.Line, d.Col = v.Pos.Line, v.Pos.Col
	}
	s.diags = append(s.diags, d)
}

func (s *sink) errorf(v *lenient.Value, path, fix, format string, args ...any) {
	s.add(Error, v, path, fmt.Sprintf(format, args...), fix)
}

func (s *sink) warnf(v *lenient.Value, path, fix, format string, args ...any) {
	s.add(Warning, v, path, fmt.Sprintf(format, args...), fix)
}

func (s *sink) unsupportedf(v *lenient.Value, path, fix, format string, args ...any) {
	s.add(Unsupported, v, path, fmt.Sprintf(format, args...), fix)
}

func (s *sink) infof(v *lenient.Value, path, format string, args ...any) {
	s.add(Info, v, path, fmt.Sprintf(format, args...), "")
}

// echoLimit is how many characters of a key or value from the config a
// message repeats. A config may hold a 5 MB key; its diagnostic names the
// key by its start and the position, not by all of it.
const echoLimit = 60

// head returns the first echoLimit characters of s and whether that cut
// it. It reads no further into s than it keeps.
func head(s string) (string, bool) {
	n := 0
	for i := range s {
		if n == echoLimit {
			return s[:i], true
		}
		n++
	}
	return s, false
}

// clip returns s cut to echoLimit characters, marked with "…" when cut.
func clip(s string) string {
	if h, cut := head(s); cut {
		return h + "…"
	}
	return s
}

// quote writes a name in double quotes, clipped ("abc…" becomes "abc"…).
func quote(s string) string {
	h, cut := head(s)
	if cut {
		return `"` + h + `"…`
	}
	return `"` + s + `"`
}

// quoteStr quotes a string value from the config Go-style (escaping
// control characters), clipped like quote.
func quoteStr(s string) string {
	h, cut := head(s)
	if cut {
		return strconv.Quote(h) + "…"
	}
	return strconv.Quote(s)
}

// clipPath clips each key of a dotted JSON path.
func clipPath(path string) string {
	if len(path) <= echoLimit {
		return path
	}
	parts := strings.Split(path, ".")
	for i, p := range parts {
		parts[i] = clip(p)
	}
	return strings.Join(parts, ".")
}

// joinPath appends a key to a dotted JSON path.
func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}
