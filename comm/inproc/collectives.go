package inproc

import (
	"fmt"
	"sort"

	"github.com/dszero/dszero/comm"
)

// run is one collective on rank c.rank: arrive, wait for every rank, move
// this rank's share of the data, and wait until every rank is done with the
// others' buffers.
func (c *rankComm) run(x *call, w *waiter) *fault {
	g := c.g
	rd, f := g.arrive(c.rank, x)
	if f != nil {
		return f
	}
	if f := g.wait(rd, phaseArrive, w); f != nil {
		return f
	}
	switch x.Kind {
	case comm.KindBarrier:
		return nil
	case comm.KindSplit:
		c.split(rd, x)
		return nil
	}
	if f := g.beginCopy(); f != nil {
		return f
	}
	c.move(rd, x)
	g.endCopy()
	g.reach(rd, c.rank, phaseDone)
	return g.wait(rd, phaseDone, w)
}

// chunk is rank r's share [lo, hi) of n elements cut into size parts.
func chunk(n, size, r int) (lo, hi int) { return n * r / size, n * (r + 1) / size }

// move is this rank's share of the data movement. Between the two phases
// each rank touches only memory no other rank touches:
//
//   - all_reduce: rank r reduces elements chunk(r) of every rank's buffer,
//     in gloo's ring order (comm.ReduceRing), and writes the result into
//     chunk(r) of every rank's buffer. Each rank reads and writes the buffer's size once — the
//     traffic of one memcpy — and the ranks work in parallel.
//   - reduce_scatter: rank r reduces chunk r of every rank's in into its
//     out (which may be its own chunk r of in).
//   - all_gather: rank r copies every rank's in into its out, skipping its
//     own chunk when it is in place.
//   - all_to_all: rank r copies chunk r of every rank's in into its out.
//   - broadcast: every rank but the root copies the root's buffer.
func (c *rankComm) move(rd *round, x *call) {
	n := c.g.size()
	bufs := c.scratch(n)
	switch x.Kind {
	case comm.KindAllReduce:
		if n == 1 {
			return // the sum and the average of one buffer are the buffer
		}
		lo, hi := chunk(x.Out.Len(), n, c.rank)
		for k, o := range rd.calls {
			bufs[k] = o.Out.Slice(lo, hi)
		}
		comm.ReduceRing(bufs, bufs, x.Op, lo, x.Out.Len())
	case comm.KindReduceScatter:
		m := x.Out.Len()
		for k, o := range rd.calls {
			bufs[k] = o.In.Slice(c.rank*m, (c.rank+1)*m)
		}
		comm.Reduce([]comm.Buffer{x.Out}, bufs, x.Op)
	case comm.KindAllGather:
		m := x.In.Len()
		for k, o := range rd.calls {
			if dst := x.Out.Slice(k*m, (k+1)*m); !comm.Same(dst, o.In) {
				comm.Copy(dst, o.In)
			}
		}
	case comm.KindAllToAll:
		m := x.Out.Len() / n
		for k, o := range rd.calls {
			comm.Copy(x.Out.Slice(k*m, (k+1)*m), o.In.Slice(c.rank*m, (c.rank+1)*m))
		}
	case comm.KindBroadcast:
		if c.rank != x.Root {
			comm.Copy(x.Out, rd.calls[x.Root].Out)
		}
	}
	clear(bufs)
}

// scratch is the worker's reusable slice of n views.
func (c *rankComm) scratch(n int) []comm.Buffer {
	if cap(c.bufs) < n {
		c.bufs = make([]comm.Buffer, n)
	}
	return c.bufs[:n]
}

// split makes the new groups of a Split, once per round (the first rank to
// get here makes them all), and this rank's communicator on its own.
func (c *rankComm) split(rd *round, x *call) {
	g := c.g
	g.mu.Lock()
	if rd.split == nil {
		rd.split = g.makeSplit(rd)
	}
	sub := rd.split[x.color]
	g.mu.Unlock()
	if sub == nil {
		return
	}
	c.job.register(sub)
	x.split = c.job.newRankComm(sub, sub.rankOf(g.members[c.rank]))
}

// makeSplit groups the ranks of rd by color, ordered by (key, rank).
func (g *group) makeSplit(rd *round) map[int]*group {
	byColor := map[int][]int{}
	for r, x := range rd.calls {
		if x.color != comm.NoColor {
			byColor[x.color] = append(byColor[x.color], r)
		}
	}
	groups := make(map[int]*group, len(byColor))
	for color, ranks := range byColor {
		sort.SliceStable(ranks, func(i, j int) bool { return rd.calls[ranks[i]].key < rd.calls[ranks[j]].key })
		members := make([]int, len(ranks))
		for i, r := range ranks {
			members[i] = g.members[r]
		}
		groups[color] = g.job.newGroup(groupName(members), members)
	}
	return groups
}

func groupName(members []int) string { return "group" + fmt.Sprint(members) }
