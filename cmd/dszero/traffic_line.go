package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/dszero/dszero/mem"
)

// formatSent is a step's bytes sent per collective kind, largest first,
// with their total: "all_reduce 3.34 MiB | all_gather 80 B | total 3.34 MiB".
func formatSent(sent map[string]int64) string {
	kinds := make([]string, 0, len(sent))
	var total int64
	for k, b := range sent {
		kinds = append(kinds, k)
		total += b
	}
	sort.Slice(kinds, func(i, j int) bool {
		if sent[kinds[i]] != sent[kinds[j]] {
			return sent[kinds[i]] > sent[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	parts := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %s", k, mem.FormatBytes(sent[k])))
	}
	parts = append(parts, "total "+mem.FormatBytes(total))
	return strings.Join(parts, " | ")
}
