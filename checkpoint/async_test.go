package checkpoint_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/ztest"
	"github.com/google/go-cmp/cmp"
)

// TestSaveAsyncMatchesSync: a save started after step 3 and written while
// steps 4 and 5 change the state writes the files the synchronous save of
// step 3 writes (testdata/save_sha256.json); latest names it only once it
// is finished; and the run's last steps are those of a run without the
// save.
func TestSaveAsyncMatchesSync(t *testing.T) {
	b, err := os.ReadFile(savedHashes)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	d := ztest.MustLoadMLP(t, mlpRef)
	for _, c := range saveCases {
		if c.extra != "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			plan, err := ztest.Plan(stageJSON(c.stage, c.dtype, c.subGroup), 2)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			latestAtSave := "unset"
			res, err := mlpRun{from: 0, to: 5, dir: dir, saveAt: []int{3}, async: true, afterSave: func(int) {
				b, err := os.ReadFile(filepath.Join(dir, "latest"))
				latestAtSave = fmt.Sprint(string(b), err)
			}}.run(plan, d)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(latestAtSave, "no such file") {
				t.Errorf("latest when SaveAsync returned: %q, want none yet", latestAtSave)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "latest")); err != nil || string(b) != "global_step3" {
				t.Errorf("latest after the run: %q, %v; want global_step3", b, err)
			}
			got := map[string]string{}
			for r := range 2 {
				b, err := os.ReadFile(filepath.Join(dir, "global_step3", fmt.Sprintf("dszero_manifest_rank_%d.json", r)))
				if err != nil {
					t.Fatal(err)
				}
				var man struct {
					Files []struct{ Name, SHA256 string }
				}
				if err := json.Unmarshal(b, &man); err != nil {
					t.Fatal(err)
				}
				for _, f := range man.Files {
					got[f.Name] = f.SHA256
				}
			}
			if diff := cmp.Diff(want[c.name], got); diff != "" {
				t.Errorf("files differ from the synchronous save's (-sync +async):\n%s", diff)
			}
			whole := runMLP(t, plan, d, 0, 5, "", false, false)
			if diff := cmp.Diff(whole.losses, res.losses); diff != "" {
				t.Errorf("losses with an asynchronous save differ (-without +with):\n%s", diff)
			}
		})
	}
}
