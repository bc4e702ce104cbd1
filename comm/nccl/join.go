package nccl

import (
	"context"
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/comm/rendezvous"
)

// Job is a process's NCCL world and the rendezvous it came from.
type Job struct {
	*World
	Session *rendezvous.Session
}

// Join is the start of a torchrun- or deepspeed-launched process: the
// rendezvous at MASTER_ADDR:MASTER_PORT hands rank 0's NCCL unique id to
// every rank, and the world communicator is created from it, with the
// store kept for the monitor. opts.Rank, Size, ID and Store are set from
// env and the rendezvous; the rest (Lib, Device, Timeout, Heartbeat) is
// the caller's. The rendezvous waits up to opts.Timeout too.
func Join(ctx context.Context, env comm.Env, opts Options) (*Job, error) {
	s, err := rendezvous.Rendezvous(ctx, env, rendezvous.Options{Timeout: opts.Timeout, Blob: func() ([]byte, error) {
		id, err := opts.Lib.GetUniqueID()
		return id[:], err
	}})
	if err != nil {
		return nil, err
	}
	if len(s.Blob) != len(UniqueID{}) {
		s.Close(ctx)
		return nil, fmt.Errorf("nccl: rank 0 handed out %d bytes as the NCCL unique id, want %d", len(s.Blob), len(UniqueID{}))
	}
	opts.Rank, opts.Size = env.Rank, env.WorldSize
	copy(opts.ID[:], s.Blob)
	if s.Store != nil {
		opts.Store = s.Store
	}
	w, err := NewWorld(ctx, opts)
	if err != nil {
		s.Close(ctx)
		return nil, err
	}
	return &Job{World: w, Session: s}, nil
}

// Close closes the world, then the rendezvous session (rank 0 serves the
// store until every rank has closed, or ctx ends).
func (j *Job) Close(ctx context.Context) error {
	err := j.World.Close()
	if serr := j.Session.Close(ctx); err == nil {
		err = serr
	}
	return err
}
