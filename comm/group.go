package comm

import (
	"context"
	"fmt"
)

// NewGroup makes a communicator of the given ranks of c, in the order given
// (torch.distributed.new_group): ranks[i] becomes rank i of the new
// communicator. It is a collective over c: every rank of c calls it, with
// the same list, and ranks not in the list get a nil Comm and a nil error.
// It returns an error for an empty list, a rank outside c, or a repeated
// rank, without communicating (every rank sees the same list, so every rank
// refuses it).
func NewGroup(ctx context.Context, c Comm, ranks []int) (Comm, error) {
	if len(ranks) == 0 {
		return nil, fmt.Errorf("comm: NewGroup with no ranks")
	}
	key := NoColor
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= c.Size() {
			return nil, fmt.Errorf("comm: NewGroup %v: rank %d is outside the communicator of size %d", ranks, r, c.Size())
		}
		if seen[r] {
			return nil, fmt.Errorf("comm: NewGroup %v: rank %d appears twice", ranks, r)
		}
		seen[r] = true
		if r == c.Rank() {
			key = i
		}
	}
	color := 0
	if key == NoColor {
		color, key = NoColor, 0
	}
	return c.Split(ctx, color, key)
}

// Mesh is the two-level layout of hybrid sharding (torch HSDP's (replicate,
// shard) device mesh; ZeRO++ hpZ's secondary partition): World ranks are cut
// into Replicas = World/Shard consecutive blocks of Shard ranks. Parameters
// are sharded within a block (the shard group) and replicated across blocks
// (the replica group):
//
//	rank = replica·Shard + shard,   0 ≤ replica < Replicas, 0 ≤ shard < Shard
//
// With Shard = World there is one shard group (plain ZeRO); with Shard = 1
// every rank is its own shard group (plain data parallelism). Consecutive
// ranks share a shard group because launchers number the ranks of one node
// consecutively, so sharding traffic stays inside a node.
type Mesh struct {
	World int // all ranks
	Shard int // ranks per shard group
}

// NewMesh checks that shard divides world.
func NewMesh(world, shard int) (Mesh, error) {
	if world < 1 || shard < 1 || world%shard != 0 {
		return Mesh{}, fmt.Errorf("comm: hybrid mesh of %d ranks in shard groups of %d: the group size must divide the world size", world, shard)
	}
	return Mesh{World: world, Shard: shard}, nil
}

// Replicas is the number of shard groups, World/Shard.
func (m Mesh) Replicas() int { return m.World / m.Shard }

// Coords is the place of a world rank: which replica (shard group) and which
// shard within it.
func (m Mesh) Coords(rank int) (replica, shard int) { return rank / m.Shard, rank % m.Shard }

// Rank is the world rank at (replica, shard).
func (m Mesh) Rank(replica, shard int) int { return replica*m.Shard + shard }

// ShardGroup is the world ranks of rank's shard group, in shard order.
func (m Mesh) ShardGroup(rank int) []int {
	rep, _ := m.Coords(rank)
	g := make([]int, m.Shard)
	for s := range g {
		g[s] = m.Rank(rep, s)
	}
	return g
}

// ReplicaGroup is the world ranks that hold the same shard as rank, in
// replica order.
func (m Mesh) ReplicaGroup(rank int) []int {
	_, s := m.Coords(rank)
	g := make([]int, m.Replicas())
	for rep := range g {
		g[rep] = m.Rank(rep, s)
	}
	return g
}

// Split makes rank c.Rank()'s two communicators of the mesh: its shard group
// (rank in it = shard index) and its replica group (rank in it = replica
// index). It is two collectives over c, which must be the world of the mesh.
func (m Mesh) Split(ctx context.Context, c Comm) (shard, replica Comm, err error) {
	if c.Size() != m.World {
		return nil, nil, fmt.Errorf("comm: mesh of %d ranks split over a communicator of %d", m.World, c.Size())
	}
	rep, s := m.Coords(c.Rank())
	if shard, err = c.Split(ctx, rep, s); err != nil {
		return nil, nil, fmt.Errorf("comm: mesh shard groups: %w", err)
	}
	if replica, err = c.Split(ctx, s, rep); err != nil {
		return nil, nil, fmt.Errorf("comm: mesh replica groups: %w", err)
	}
	return shard, replica, nil
}
