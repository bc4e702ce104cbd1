package partition

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// randomParams draws a parameter list: sometimes empty, with zero-sized,
// tiny and larger parameters, so that every padding case comes up.
func randomParams(rng *rand.Rand, trial int) []Param {
	n := rng.IntN(9)
	if trial == 0 {
		n = 0
	}
	ps := make([]Param, n)
	for i := range ps {
		numel := rng.IntN(20)
		if rng.IntN(4) == 0 {
			numel = rng.IntN(700)
		}
		ps[i] = Param{Name: fmt.Sprintf("w%d", i), Numel: numel}
	}
	return ps
}

// distinct fills each parameter with values no other element has, so a
// misplaced element cannot go unnoticed.
func distinct(ps []Param) [][]int32 {
	out := make([][]int32, len(ps))
	v := int32(1)
	for i, p := range ps {
		out[i] = make([]int32, p.Numel)
		for k := range out[i] {
			out[i][k] = v
			v++
		}
	}
	return out
}

// equal2 compares parameter lists element-wise (cmp is too slow for the
// property loops; it only formats failures).
func equal2(a, b [][]int32) bool {
	return slices.EqualFunc(a, b, slices.Equal)
}

func nonNil(vs [][]int32) [][]int32 {
	out := make([][]int32, len(vs))
	for i, v := range vs {
		out[i] = append([]int32{}, v...)
	}
	return out
}

// Shards reassemble to the full buffer, for many world sizes and shapes,
// both from whole partitions and from checkpoint-style stripped ones.
func TestFlatRoundTrip(t *testing.T) {
	rng := newRand(2)
	for world := 1; world <= 9; world++ {
		for trial := range 30 {
			ps := randomParams(rng, trial)
			if trial%2 == 1 {
				ps = Permute(ps, RoundRobinOrder(len(ps), world))
			}
			l := Flat(ps, world)
			values := distinct(ps)
			flat := Flatten(l, values)
			for off := l.Total; off < l.Padded; off++ {
				if flat[off] != 0 {
					t.Fatalf("world %d: padding at %d is %d", world, off, flat[off])
				}
			}
			whole := make([][]int32, world)
			stripped := make([][]int32, world)
			for r := range world {
				whole[r] = Shard(l, flat, r)
				if got := Shard(l, flat[:l.Total], r); !slices.Equal(whole[r], got) {
					t.Fatalf("world %d rank %d: Shard of the unpadded buffer differs:\n%s", world, r, cmp.Diff(whole[r], got))
				}
				stripped[r] = whole[r][:l.SavedLen(r)]
				for _, f := range l.SliceMappings(r) {
					got := whole[r][f.PartitionOffset : f.PartitionOffset+f.Len]
					want := values[f.Param][f.ParamOffset : f.ParamOffset+f.Len]
					if !slices.Equal(want, got) {
						t.Fatalf("world %d rank %d fragment %+v:\n%s", world, r, f, cmp.Diff(want, got))
					}
				}
			}
			for name, parts := range map[string][][]int32{"whole": whole, "stripped": stripped} {
				got, err := AssembleFlat(l, parts)
				if err != nil {
					t.Fatalf("world %d: AssembleFlat(%s): %v", world, name, err)
				}
				if !slices.Equal(flat, got) {
					t.Fatalf("world %d: AssembleFlat(%s) (-want +got):\n%s", world, name, cmp.Diff(flat, got))
				}
			}
			// zero_to_fp32: concatenate the saved partitions, cut the parameters.
			var saved []int32
			for _, p := range stripped {
				saved = append(saved, p...)
			}
			if len(saved) != l.Total {
				t.Fatalf("world %d: saved partitions hold %d elements, want %d", world, len(saved), l.Total)
			}
			if got := Unflatten(l, saved); !equal2(values, got) {
				t.Fatalf("world %d: Unflatten (-want +got):\n%s", world, cmp.Diff(values, nonNil(got)))
			}
		}
	}
}

func TestStage3RoundTrip(t *testing.T) {
	rng := newRand(3)
	for world := 1; world <= 9; world++ {
		for trial := range 30 {
			ps := randomParams(rng, trial)
			l := Stage3(ps, world, rng.IntN(100))
			values := distinct(ps)
			flats := make([][]int32, world)
			for r := range world {
				flats[r] = ShardStage3(l, values, r)
				zeros := 0
				for i, p := range values {
					part := flats[r][l.Offsets[i] : l.Offsets[i]+l.PartitionSizes[i]]
					if want := ShardParam(p, world, r); !slices.Equal(want, part) {
						t.Fatalf("world %d rank %d param %d: ShardStage3 and ShardParam differ:\n%s", world, r, i, cmp.Diff(want, part))
					}
					for _, v := range part {
						zeros += b2i(v == 0)
					}
				}
				if zeros != l.Padding(r) {
					t.Fatalf("world %d rank %d: %d zero (padding) elements, Padding says %d", world, r, zeros, l.Padding(r))
				}
			}
			got, err := AssembleStage3(l, flats)
			if err != nil {
				t.Fatalf("world %d: %v", world, err)
			}
			if !equal2(values, got) {
				t.Fatalf("world %d: AssembleStage3 (-want +got):\n%s", world, cmp.Diff(values, nonNil(got)))
			}
			for i, p := range values {
				parts := make([][]int32, world)
				for r := range world {
					parts[r] = ShardParam(p, world, r)
				}
				full, err := AssembleParam(parts, len(p))
				if err != nil {
					t.Fatalf("world %d param %d: %v", world, i, err)
				}
				if !slices.Equal(p, full) {
					t.Fatalf("world %d param %d: AssembleParam (-want +got):\n%s", world, i, cmp.Diff(p, full))
				}
			}
			// Sub-groups tile the rank buffer in order.
			next := 0
			for g, idx := range l.SubGroups {
				for _, i := range idx {
					if i != next {
						t.Fatalf("world %d: sub-group %d holds parameter %d, want %d", world, g, i, next)
					}
					next++
				}
				if len(idx) > 0 && l.SubGroupOffset(g) != l.Offsets[idx[0]] {
					t.Fatalf("world %d: sub-group %d offset %d", world, g, l.SubGroupOffset(g))
				}
			}
			if next != len(ps) {
				t.Fatalf("world %d: sub-groups hold %d of %d parameters", world, next, len(ps))
			}
		}
	}
}

func TestAssembleErrors(t *testing.T) {
	fl := Flat(params(5, 6), 4) // partitions of 4; saved lengths 4 4 3 0
	s3 := Stage3(params(5, 6), 2, 100)
	tests := []struct {
		name string
		err  func() error
		want string
	}{
		{"flat: wrong rank count", func() error { _, err := AssembleFlat(fl, make([][]float32, 3)); return err },
			"partition: 3 partitions for world size 4"},
		{"flat: wrong length", func() error {
			_, err := AssembleFlat(fl, [][]float32{make([]float32, 4), make([]float32, 4), make([]float32, 2), nil})
			return err
		}, "partition: rank 2 partition has 2 elements, want 4 (or 3 without padding)"},
		{"param: wrong length", func() error { _, err := AssembleParam([][]float32{{1, 2}, {3}}, 4); return err },
			"partition: rank 1 partition has 1 elements, want 2"},
		{"param: no parts", func() error { _, err := AssembleParam[float32](nil, 4); return err },
			"partition: no partitions"},
		{"stage 3: wrong length", func() error {
			_, err := AssembleStage3(s3, [][]float32{make([]float32, 6), make([]float32, 5)})
			return err
		}, "partition: rank 1 flat buffer has 5 elements, want 6"},
		{"stage 3: wrong rank count", func() error { _, err := AssembleStage3(s3, make([][]float32, 1)); return err },
			"partition: 1 rank buffers for world size 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err()
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v, want %q", err, tt.want)
			}
		})
	}
}
