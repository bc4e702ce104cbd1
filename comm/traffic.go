package comm

import (
	"fmt"
	"strings"
)

// Counts is what one rank moved in collectives of one kind.
type Counts struct {
	Calls    int64 // collectives completed without error
	Bytes    int64 // payload: the bytes of the buffers this rank passed (in + out, each once)
	Sent     int64 // nominal bytes sent (see NominalTraffic)
	Received int64 // nominal bytes received
}

// Add is c + d, field by field.
func (c Counts) Add(d Counts) Counts {
	return Counts{c.Calls + d.Calls, c.Bytes + d.Bytes, c.Sent + d.Sent, c.Received + d.Received}
}

// Traffic is one rank's counts on one communicator, by collective kind.
// Counts on different communicators (the shard and replica groups of a hybrid
// layout) are kept apart, which is what a hybrid-sharding report needs.
type Traffic struct {
	ByKind [NumKinds]Counts
}

// Of is the counts of one kind.
func (t Traffic) Of(k Kind) Counts { return t.ByKind[k] }

// Total is the sum over kinds.
func (t Traffic) Total() Counts {
	var s Counts
	for _, c := range t.ByKind {
		s = s.Add(c)
	}
	return s
}

// Record adds one completed collective to t. Backends call it; callers read
// Traffic snapshots.
func (t *Traffic) Record(k Kind, c Counts) { t.ByKind[k] = t.ByKind[k].Add(c) }

// String lists the kinds that were used, one per line.
func (t Traffic) String() string {
	var b strings.Builder
	for k, c := range t.ByKind {
		if c.Calls == 0 {
			continue
		}
		fmt.Fprintf(&b, "%-14s calls %d  bytes %d  sent %d  received %d\n", Kind(k), c.Calls, c.Bytes, c.Sent, c.Received)
	}
	return b.String()
}

// NominalTraffic is the bytes one rank sends and receives in one collective
// under the bandwidth-optimal ring algorithms that NCCL's "bus bandwidth"
// model assumes, for n ranks and a payload of b bytes, where b is:
//
//	all_reduce      the buffer:    sent = received = 2·(n−1)·b/n
//	reduce_scatter  the input:     sent = received = (n−1)·b/n
//	all_gather      the output:    sent = received = (n−1)·b/n
//	all_to_all      the input:     sent = received = (n−1)·b/n
//	broadcast       the buffer:    root sends b; every other rank receives b
//	barrier, split  0
//
// (integer division last). Every backend counts with this one formula, so
// traffic reports do not depend on how a backend moves the bytes — the
// in-process backend reads and writes other ranks' memory directly and moves
// fewer bytes than this. With n = 1 everything is 0.
func NominalTraffic(k Kind, n, rank, root int, b int64) (sent, received int64) {
	if n <= 1 {
		return 0, 0
	}
	m := int64(n)
	switch k {
	case KindAllReduce:
		v := 2 * (m - 1) * b / m
		return v, v
	case KindReduceScatter, KindAllGather, KindAllToAll:
		v := (m - 1) * b / m
		return v, v
	case KindBroadcast:
		if rank == root {
			return b, 0
		}
		return 0, b
	}
	return 0, 0
}

// SentSince is the nominal bytes sent per collective kind between before
// and t (a later snapshot of the same Comm), by the kind's torch name,
// for the kinds that sent any.
func (t Traffic) SentSince(before Traffic) map[string]int64 {
	var m map[string]int64
	for k := range t.ByKind {
		if d := t.ByKind[k].Sent - before.ByKind[k].Sent; d != 0 {
			if m == nil {
				m = map[string]int64{}
			}
			m[Kind(k).String()] = d
		}
	}
	return m
}
