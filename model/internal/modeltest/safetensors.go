package modeltest

import "github.com/dszero/dszero/internal/stformat"

// CheckSafetensorsFormat parses the file at path by the reference
// safetensors library's rules (package stformat's Check).
func CheckSafetensorsFormat(path string) error { return stformat.Check(path) }
