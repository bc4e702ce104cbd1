package partition_test

import (
	"fmt"

	"github.com/dszero/dszero/zero/partition"
)

// Stage 1/2: the flat buffer of a 5- and a 6-element parameter on 4 ranks.
func ExampleFlat() {
	l := partition.Flat([]partition.Param{{Name: "a", Numel: 5}, {Name: "b", Numel: 6}}, 4)
	fmt.Println("total", l.Total, "padded", l.Padded, "partition", l.PartitionSize)
	for r := range l.World {
		fmt.Print("rank ", r, " padding ", l.Padding(r), ":")
		for _, f := range l.SliceMappings(r) {
			fmt.Printf(" %s[%d:%d]@%d", f.Name, f.ParamOffset, f.ParamOffset+f.Len, f.PartitionOffset)
		}
		fmt.Println()
	}
	// Output:
	// total 11 padded 16 partition 4
	// rank 0 padding 0: a[0:4]@0
	// rank 1 padding 0: a[4:5]@0 b[0:3]@1
	// rank 2 padding 1: b[3:6]@0
	// rank 3 padding 4:
}

// Stage 3: each parameter partitioned on its own.
func ExamplePerParam() {
	for r := range 4 {
		lo, hi, pad := partition.PerParam(5, 4, r)
		fmt.Printf("rank %d: [%d,%d) + %d padding\n", r, lo, hi, pad)
	}
	// Output:
	// rank 0: [0,2) + 0 padding
	// rank 1: [2,4) + 0 padding
	// rank 2: [4,5) + 1 padding
	// rank 3: [5,5) + 2 padding
}

// round_robin_gradients: the flattening order for 5 parameters on 2 ranks.
func ExampleRoundRobinOrder() {
	fmt.Println(partition.RoundRobinOrder(5, 2))
	// Output: [0 2 4 1 3]
}
