package main

import "testing"

func TestFormatSent(t *testing.T) {
	got := formatSent(map[string]int64{"all_reduce": 4, "all_to_all": 2048, "all_gather": 2048})
	want := "all_gather 2.00 KiB | all_to_all 2.00 KiB | all_reduce 4 B | total 4.00 KiB"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
