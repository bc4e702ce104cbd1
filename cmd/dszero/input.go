package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// readConfigInput returns the bytes of a config given as a path, a JSON
// string or DeepSpeed's urlsafe-base64 of one.
func readConfigInput(arg string) ([]byte, error) {
	data, err := os.ReadFile(arg)
	if err == nil {
		return data, nil
	}
	if t := strings.TrimSpace(arg); strings.HasPrefix(t, "{") {
		return []byte(arg), nil
	}
	if dec, derr := base64.URLEncoding.DecodeString(strings.TrimSpace(arg)); derr == nil && strings.HasPrefix(strings.TrimSpace(string(dec)), "{") {
		return dec, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no such file %s (and not a JSON or base64 config); give the path to your ds_config.json", arg)
	}
	return nil, err
}
