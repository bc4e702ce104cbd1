package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(`{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}, "bp16": {"enabled": true}}`), 0o644)
	os.WriteFile(bad, []byte("{\n  \"train_batch_size\": 4,\n  \"zero_optimization\": {\"stage\": 2, \"stage3_param_persitence_threshold\": 1e5}\n}\n"), 0o644)

	code, out, _ := runCLI("config", "check", good)
	if code != 0 || !strings.Contains(out, "ACCEPT") || !strings.Contains(out, `did you mean "bf16"?`) {
		t.Errorf("good: code %d\n%s", code, out)
	}
	code, out, _ = runCLI("config", "check", bad, "--world-size", "8")
	if code != 1 {
		t.Errorf("bad: code %d\n%s", code, out)
	}
	// file:line:col: path: severity: message
	if !regexp.MustCompile(`bad\.json:3:\d+: zero_optimization\.stage3_param_persitence_threshold: error: .*did you mean`).MatchString(out) {
		t.Errorf("want a positioned error with a suggestion:\n%s", out)
	}
	if code, _, _ := runCLI("config", "check"); code != 2 {
		t.Errorf("no files: code %d", code)
	}
	if code, _, _ := runCLI("config", "frobnicate"); code != 2 {
		t.Errorf("bad subcommand: code %d", code)
	}
	if code, out, _ := runCLI("config", "check", filepath.Join(dir, "missing.json")); code != 1 || !strings.Contains(out, "no such file") {
		t.Errorf("missing file: code %d %s", code, out)
	}
}

// TestReadmeCommands runs the dszero commands written in README.md.
func TestReadmeCommands(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := regexp.MustCompile(`(?m)^\s+go run \./cmd/dszero (.+)$`).FindAllStringSubmatch(string(readme), -1)
	if len(cmds) < 2 {
		t.Fatalf("README has %d dszero commands", len(cmds))
	}
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir("cmd/dszero")
	for _, c := range cmds {
		args := strings.Fields(c[1])
		if args[0] == "train" {
			// The README's runs train for a minute; here a few steps
			// check that the command works as written.
			args = append(args, "--steps", "2", "--quiet")
		}
		code, out, errs := runCLI(args...)
		if code != 0 {
			t.Errorf("README command %q: exit %d\n%s%s", c[1], code, out, errs)
		}
	}
}

func TestExplainJSON(t *testing.T) {
	code, out, errs := runCLI("config", "explain", "../../examples/ds_config_zero2.json", "--world-size", "4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{`"zero_stage": 2`, `"precision": "bf16"`, `"TrainBatchSize": 32`, `"source": "file"`} {
		if !strings.Contains(out, want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
}

// TestReadmeSetup: the set-up section keeps its two commands (the main
// job and the tests), and its timing says what it depends on: about a
// minute with OpenBLAS, several without it.
func TestReadmeSetup(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	start := strings.Index(s, "## Set up on a fresh machine")
	end := strings.Index(s[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("README has no set-up section")
	}
	setup := s[start : start+1+end]
	cmds := regexp.MustCompile(`(?m)^    (\S.*)$`).FindAllStringSubmatch(setup, -1)
	if len(cmds) != 2 || cmds[0][1] != "go run ./cmd/dszero train" || cmds[1][1] != "go test ./..." {
		t.Errorf("set-up commands %q, want the main job and the tests", cmds)
	}
	for _, want := range []string{"about a minute on 2 cores when OpenBLAS is\ninstalled", "libopenblas0-pthread", "about five minutes without it"} {
		if !strings.Contains(setup, want) {
			t.Errorf("set-up section lacks %q:\n%s", want, setup)
		}
	}
}

// TestGoModTidy: go mod tidy leaves go.mod and go.sum as they are.
func TestGoModTidy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	cmd := exec.Command("go", "mod", "tidy", "-diff")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go mod tidy would change the module files (%v):\n%s", err, out)
	}
}
