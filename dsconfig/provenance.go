package dsconfig

import (
	"encoding/json"
	"fmt"
)

// Source says where a resolved value came from.
type Source int

const (
	FromDefault     Source = iota // DeepSpeed 0.19.5's default; the key is absent
	FromFile                      // written in the config under its field name
	FromAlias                     // written under an alias (stage3_prefetch_bucket_size for prefetch_bucket_size)
	FromMigrated                  // a deprecated key, migrated the way DeepSpeed migrates it
	FromAutoDefault               // written as "auto"; DeepSpeed drops it, so the default applies
	FromHF                        // written as "auto" and filled from HF training arguments
	FromDerived                   // computed from other values (batch arithmetic, dynamic defaults)
	FromLegacy                    // a legacy form (zero_optimization: true, the bfloat16 block)
)

var sourceNames = [...]string{"default", "file", "alias", "migrated", "auto→default", "auto→hf", "derived", "legacy"}

func (s Source) String() string {
	if s < 0 || int(s) >= len(sourceNames) {
		return fmt.Sprintf("Source(%d)", int(s))
	}
	return sourceNames[s]
}

// MarshalText writes the source's name (for --json).
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Setting is one resolved knob with its provenance.
type Setting struct {
	Path    string `json:"path"`              // canonical JSON path (field names, not aliases)
	Value   any    `json:"value"`             // the resolved value
	Source  Source `json:"source"`            // where it came from
	Written string `json:"written,omitempty"` // the key as written, when it differs from the path's last element
	Line    int    `json:"line,omitempty"`
	Col     int    `json:"col,omitempty"`
	Note    string `json:"note,omitempty"`
}

// ValueString formats the value the way it would be written in JSON.
func (s Setting) ValueString() string {
	b, err := json.Marshal(s.Value)
	if err != nil {
		return fmt.Sprint(s.Value)
	}
	return string(b)
}

// recorder collects settings in the order they are resolved.
type recorder struct {
	settings []Setting
	index    map[string]int
}

func (r *recorder) set(s Setting) {
	if r.index == nil {
		r.index = map[string]int{}
	}
	if i, ok := r.index[s.Path]; ok {
		r.settings[i] = s
		return
	}
	r.index[s.Path] = len(r.settings)
	r.settings = append(r.settings, s)
}

func (r *recorder) get(path string) (Setting, bool) {
	i, ok := r.index[path]
	if !ok {
		return Setting{}, false
	}
	return r.settings[i], true
}
