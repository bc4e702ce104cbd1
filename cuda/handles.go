package cuda

import "github.com/dszero/dszero/cuda/driver"

// Handle is the stream's CUstream, for libraries that queue their own work
// on it (NCCL collectives, package comm/nccl). Work queued that way is
// ordered with the stream's other work like any of it.
func (s *Stream) Handle() driver.Stream { return s.h }

// Device is the device the stream belongs to.
func (s *Stream) Device() *Device { return s.d }
