package train

import (
	"fmt"
	"time"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/zero"
)

// asyncSaver runs the asynchronous saves of Config.SaveAsync
// (checkpoint.SaveAsync): a save snapshots the rank's state and returns;
// after every later step every rank polls it (a collective), and it is
// finished — its files agreed complete, then published and latest
// replaced — once every rank's write is done, at the latest before the
// next save and after the last step. An error of the background write
// surfaces at that poll, naming the checkpoint.
type asyncSaver struct {
	cfg     *Config
	c       comm.Comm
	eng     *zero.Engine
	ck      checkpoint.Options
	pending *checkpoint.Pending
	started time.Time
	step    int64 // the pending save's global step
}

// save starts the save of the state after global step step, finishing
// the pending one first.
func (s *asyncSaver) save(step int) error {
	if err := s.finish(); err != nil {
		return err
	}
	t0 := time.Now()
	p, err := checkpoint.SaveAsync(s.cfg.SaveDir, "", s.eng, s.ck)
	if err != nil {
		return fmt.Errorf("step %d: saving a checkpoint in %s: %w", step, s.cfg.SaveDir, err)
	}
	s.pending, s.started, s.step = p, t0, s.eng.GlobalSteps()
	return nil
}

// poll finishes the pending save if every rank's write is done.
func (s *asyncSaver) poll() error {
	if s.pending == nil {
		return nil
	}
	done, err := s.pending.Poll()
	if done || err != nil {
		return s.finished(err)
	}
	return nil
}

// finish waits for the pending save and finishes it.
func (s *asyncSaver) finish() error {
	if s.pending == nil {
		return nil
	}
	return s.finished(s.pending.Wait())
}

func (s *asyncSaver) finished(err error) error {
	s.pending = nil
	if err != nil {
		return fmt.Errorf("saving the checkpoint of step %d in %s: %w", s.step, s.cfg.SaveDir, err)
	}
	if s.cfg.OnCheckpoint != nil && s.c.Rank() == 0 {
		s.cfg.OnCheckpoint(CheckpointEvent{Saved: true, Dir: s.cfg.SaveDir, Tag: checkpoint.Tag(s.step), Step: s.step, Elapsed: time.Since(s.started)})
	}
	return nil
}

// abandon lets a rank that stops on an error wait for its write without
// a collective; the save is not published.
func (s *asyncSaver) abandon() {
	if s.pending != nil {
		s.pending.Abandon()
		s.pending = nil
	}
}
