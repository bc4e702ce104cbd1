package nvme

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// Checksums. A swap file is the only copy of what it holds: the fp32
// master weights and optimizer state of a sub-group live nowhere else
// between steps. A disk or filesystem that hands back other bytes than
// it was given — a bad block, a firmware bug, another process writing
// under nvme_path — would otherwise be trained on, and saved in the next
// checkpoint. So every block a request writes carries a CRC-32C, and
// every block read back is checked against it before the read completes.
//
// The unit is the engine's block (aio.block_size, 1 MiB by default): the
// worker that moves a block sums it, just before its pwrite or just after
// its pread, so the sums of one request are computed in parallel, on
// bytes that are in cache, and a mismatch names the byte range that
// changed. CRC-32C (the Castagnoli polynomial, which iSCSI, ext4 and
// btrfs use) runs in hardware on amd64 (SSE 4.2) and arm64, at several
// GB/s per core; hash/crc32 picks that path. It catches every burst of
// up to 32 changed bits and misses a random change with odds 2⁻³².
//
// The sums are kept in memory, with the key, not in a sidecar file: swap
// files live no longer than the Swapper (New removes what an earlier run
// left, Close removes its own), so the sums live exactly as long as the
// files they vouch for, cost 4 bytes per block, and add no I/O. A key's
// sums are those of its latest write; requests on one key run in issue
// order, so a read checks against the write it reads.

// castagnoli is the CRC-32C table; crc32 uses the CPU's instruction with
// it where there is one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrChecksum: a block of a swap file read back is not what was written
// there.
var ErrChecksum = errors.New("checksum mismatch")

// checkBlock reports whether p, a block just read, has the CRC-32C want.
func checkBlock(p []byte, want uint32) error {
	if got := crc32.Checksum(p, castagnoli); got != want {
		return fmt.Errorf("%w: its CRC-32C is %08x, %08x when it was written", ErrChecksum, got, want)
	}
	return nil
}

// blocks is the number of engine blocks of a request of n bytes.
func blocks(n, block int) int { return (n + block - 1) / block }
