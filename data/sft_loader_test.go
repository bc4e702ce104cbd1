package data

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dszero/dszero/model"
	"github.com/google/go-cmp/cmp"
)

// chatSet writes n conversations of varied lengths as JSON Lines and loads
// them with the Qwen3 tokenizer.
func chatSet(t *testing.T, n, seq int, packing bool) *SFTData {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		rec := map[string]any{"messages": []map[string]string{
			{"role": "user", "content": fmt.Sprintf("Question %d:%s", i, strings.Repeat(" why", i%7))},
			{"role": "assistant", "content": fmt.Sprintf("Answer %d.%s", i, strings.Repeat(" because", (3*i)%11))},
		}}
		line, _ := json.Marshal(rec)
		b.Write(line)
		b.WriteByte('\n')
	}
	path := writeFile(t, t.TempDir(), "chat.jsonl", b.String())
	d, err := LoadSFT(path, loadTok(t, "qwen3"), SFTOptions{Seq: seq, Packing: packing, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Packed rows: positions restart at every sample, each sample's tokens and
// shifted labels sit in its segment, no target crosses into the next
// sample, and padding takes no loss.
func TestPackedRowInvariants(t *testing.T) {
	const seq = 96
	d := chatSet(t, 40, seq, true)
	if d.Stats.Rows >= d.Stats.Samples {
		t.Fatalf("%d samples in %d rows: nothing was packed", d.Stats.Samples, d.Stats.Rows)
	}
	tokens, targets, pos := make([]int32, seq), make([]int32, seq), make([]int32, seq)
	for r := 0; r < d.Rows(); r++ {
		d.FillRow(r, tokens, targets, pos)
		k, nt := 0, 0
		for _, s := range d.RowSamples(r) {
			ids, labels := d.Sample(int(s))
			if pos[k] != 0 {
				t.Fatalf("row %d: sample %d starts at %d with position %d", r, s, k, pos[k])
			}
			for j := range ids {
				if pos[k+j] != int32(j) || tokens[k+j] != ids[j] {
					t.Fatalf("row %d, sample %d, token %d: position %d token %d, want %d %d", r, s, j, pos[k+j], tokens[k+j], j, ids[j])
				}
				want := int32(model.IgnoreIndex)
				if j+1 < len(ids) {
					want = labels[j+1]
				}
				if targets[k+j] != want {
					t.Fatalf("row %d, sample %d, position %d: target %d, want %d", r, s, j, targets[k+j], want)
				}
				if want != model.IgnoreIndex {
					nt++
					if want != tokens[k+j+1] {
						t.Fatalf("row %d: a target is not the next token of its sample", r)
					}
				}
			}
			k += len(ids)
		}
		for ; k < seq; k++ {
			if targets[k] != model.IgnoreIndex || tokens[k] != d.Pad {
				t.Fatalf("row %d position %d: padding with token %d target %d", r, k, tokens[k], targets[k])
			}
		}
		if nt != d.RowTargets(r) {
			t.Fatalf("row %d: %d targets, RowTargets says %d", r, nt, d.RowTargets(r))
		}
	}
}

// One epoch of the loader's order visits every row, so every sample and
// token, exactly once; the next epoch is another permutation.
func TestEpochCoversEverySampleOnce(t *testing.T) {
	d := chatSet(t, 40, 96, true)
	ld, err := NewSFTLoader(d, Layout{B: 2, T: 96, GAS: 3, World: 2}, true, 1234)
	if err != nil {
		t.Fatal(err)
	}
	rows := d.Rows()
	var orders [][]int
	for e := 0; e < 3; e++ {
		seen := make([]int, len(d.start)-1)
		var order []int
		tokens := 0
		for i := 0; i < rows; i++ {
			r := ld.row(int64(e*rows + i))
			order = append(order, r)
			for _, s := range d.RowSamples(r) {
				seen[s]++
				tokens += d.start[s+1] - d.start[s]
			}
		}
		for s, c := range seen {
			if c != 1 {
				t.Fatalf("epoch %d: sample %d seen %d times", e, s, c)
			}
		}
		if int64(tokens) != d.Stats.Tokens {
			t.Fatalf("epoch %d: %d tokens, the data has %d", e, tokens, d.Stats.Tokens)
		}
		orders = append(orders, order)
	}
	if cmp.Equal(orders[0], orders[1]) || cmp.Equal(orders[1], orders[2]) {
		t.Error("consecutive epochs have the same order")
	}
	again, _ := NewSFTLoader(d, Layout{B: 2, T: 96, GAS: 3, World: 2}, true, 1234)
	for i := 0; i < rows; i++ {
		if again.row(int64(rows+i)) != orders[1][i] {
			t.Fatal("the order is not a function of the seed")
		}
	}
	plain, _ := NewSFTLoader(d, Layout{B: 2, T: 96, GAS: 3, World: 2}, false, 0)
	for i := 0; i < 2*rows; i++ {
		if plain.row(int64(i)) != i%rows {
			t.Fatal("unshuffled order is not the row order")
		}
	}
}

// collect returns a step's micro-batches in the global order mb = micro ×
// world + rank, and checks each one's LossDenom.
func collect(t *testing.T, d *SFTData, world, gas, step int) (batches []model.Batch, denom int64) {
	t.Helper()
	ld, err := NewSFTLoader(d, Layout{B: 2, T: d.Seq, GAS: gas, World: world}, true, 99)
	if err != nil {
		t.Fatal(err)
	}
	var counted int64
	for micro := 0; micro < gas; micro++ {
		for r := 0; r < world; r++ {
			b := ld.NewBatch()
			ld.Micro(step, micro, r, &b)
			n := int64(0)
			for _, tg := range b.Targets {
				if tg != model.IgnoreIndex {
					n++
				}
			}
			if n != ld.MicroTargets(step, micro, r) {
				t.Errorf("world %d: micro %d rank %d has %d targets, MicroTargets says %d", world, micro, r, n, ld.MicroTargets(step, micro, r))
			}
			counted += n
			batches = append(batches, b)
		}
	}
	var ranks int64
	for r := 0; r < world; r++ {
		ranks += ld.RankDenom(step, r)
	}
	for _, b := range batches {
		if b.LossDenom != float64(counted) {
			t.Errorf("world %d: LossDenom %g, the step's batches hold %d targets", world, b.LossDenom, counted)
		}
	}
	if ranks != counted {
		t.Errorf("world %d: RankDenom sums to %d, want %d", world, ranks, counted)
	}
	return batches, counted
}

// The global batch of a step, and its LossDenom, do not depend on how it is
// split between ranks and micro-steps; steps past the end of the data wrap
// into the next epoch.
func TestSFTGlobalBatchIndependentOfWorld(t *testing.T) {
	d := chatSet(t, 25, 96, true)
	for _, step := range []int{0, 1, 5} { // 5 × 8 rows runs past the end of the rows
		ref, refDenom := collect(t, d, 1, 4, step)
		for _, wg := range [][2]int{{2, 2}, {4, 1}} {
			got, denom := collect(t, d, wg[0], wg[1], step)
			if diff := cmp.Diff(ref, got); diff != "" {
				t.Errorf("step %d, world %d × gas %d differs from 1 × 4:\n%s", step, wg[0], wg[1], diff)
			}
			if denom != refDenom {
				t.Errorf("step %d: denominator %d, want %d", step, denom, refDenom)
			}
		}
	}
}

func TestUnpackedBatch(t *testing.T) {
	d := chatSet(t, 6, 64, false)
	if d.Rows() != 6 {
		t.Fatalf("%d rows for 6 unpacked samples", d.Rows())
	}
	ld, err := NewSFTLoader(d, Layout{B: 3, T: 64, GAS: 1, World: 2}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := ld.NewBatch()
	if b.Positions != nil {
		t.Error("unpacked batches need no positions")
	}
	ld.Micro(0, 0, 1, &b) // rank 1 takes rows 3, 4, 5
	for i := 0; i < 3; i++ {
		ids, _ := d.Sample(3 + i)
		if diff := cmp.Diff(ids, b.Tokens[i*64:i*64+len(ids)]); diff != "" {
			t.Errorf("row %d:\n%s", i, diff)
		}
	}
	if _, err := NewSFTLoader(d, Layout{B: 3, T: 32, GAS: 1, World: 2}, false, 0); err == nil {
		t.Error("a layout with another sequence length was accepted")
	}
	if got := ld.StepsPerEpoch(); got != 1 {
		t.Errorf("StepsPerEpoch %d, want 1", got)
	}
	if got := ld.Epoch(3); got != 3 {
		t.Errorf("Epoch(3) = %g", got)
	}
}

func TestPermutation(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 1000} {
		p := Permutation(n, 5, 0)
		seen := make([]bool, n)
		for _, v := range p {
			if seen[v] {
				t.Fatalf("n=%d: %d twice", n, v)
			}
			seen[v] = true
		}
		if n == 1000 && (cmp.Equal(p, Permutation(n, 5, 1)) || cmp.Equal(p, Permutation(n, 6, 0))) {
			t.Error("the permutation ignores the epoch or the seed")
		}
		if !cmp.Equal(p, Permutation(n, 5, 0)) {
			t.Error("not deterministic")
		}
	}
	// Each of the 6 orders of 3 items comes up about equally often.
	counts := map[string]int{}
	for s := 0; s < 6000; s++ {
		counts[fmt.Sprint(Permutation(3, uint64(s), 0))]++
	}
	if len(counts) != 6 {
		t.Fatalf("%d distinct orders of 3, want 6", len(counts))
	}
	for k, c := range counts {
		if c < 850 || c > 1150 { // 1000 expected; σ ≈ 29
			t.Errorf("order %s drawn %d times of 6000", k, c)
		}
	}
}
