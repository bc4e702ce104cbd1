package rendezvous

import (
	"context"
	"fmt"

	"github.com/dszero/dszero/comm"
)

// BroadcastBlob hands rank 0's blob of n bytes to every rank of c (the
// rendezvous of a job that mpirun started: c is the MPI world). Rank 0
// passes its blob, of length n; the others pass nil and get rank 0's. It is
// one Broadcast on c, so every rank must call it at the same point.
func BroadcastBlob(ctx context.Context, c comm.Comm, blob []byte, n int) ([]byte, error) {
	if c.Rank() == 0 && len(blob) != n {
		return nil, fmt.Errorf("rendezvous: broadcasting a blob of %d bytes as one of %d", len(blob), n)
	}
	// Bytes travel as 16-bit words: Broadcast copies bits untouched.
	words := make([]uint16, (n+1)/2)
	if c.Rank() == 0 {
		for i, b := range blob {
			words[i/2] |= uint16(b) << (8 * (i % 2))
		}
	}
	if err := c.Broadcast(ctx, comm.BF16(words), 0).Wait(); err != nil {
		return nil, fmt.Errorf("rendezvous: broadcasting rank 0's blob: %w", err)
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(words[i/2] >> (8 * (i % 2)))
	}
	return out, nil
}
