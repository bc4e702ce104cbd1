package nccl

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dszero/dszero/comm"
)

// Store is the job's key-value store, as the monitor uses it: package
// rendezvous's Client, connected to rank 0's store.
type Store interface {
	Set(ctx context.Context, key string, value []byte) error
	MultiGet(ctx context.Context, keys ...string) (map[string][]byte, error)
}

// DefaultHeartbeat is how often a rank publishes its progress when
// Options.Heartbeat is zero.
const DefaultHeartbeat = time.Second

// The monitor is how a rank whose collective timed out learns which ranks
// did not arrive, and how it tells the others that the job has failed.
// NCCL cannot say who is missing from a collective that does not complete,
// so every rank publishes, every heartbeat, its progress record in the
// job's store: for each of its communicators the last collective it
// issued and the last that completed, and a beat counter. A rank whose
// collective #N times out reads the records of the communicator's members
// twice, two heartbeats apart: a member that has issued #N arrived; one
// that has not is busy elsewhere (its beat moved), stopped or hung (its
// beat did not move), exited (it closed its communicators), or never
// published anything. The rank then writes a notice under the job's abort
// key; every rank reads that key each heartbeat and fails its own
// collectives with the notice's cause, naming the same ranks, instead of
// waiting for its own timeout.
type monitor struct {
	w     *World
	store Store
	every time.Duration
	keys  func(worldRank int) string // progress key
	abort string                     // abort key

	mu   sync.Mutex
	beat uint64

	stop chan struct{}
	done chan struct{}
}

// progressRec is one rank's record.
type progressRec struct {
	Beat   uint64                  `json:"beat"`
	Closed bool                    `json:"closed,omitempty"`
	Comms  map[string]commProgress `json:"comms,omitempty"`
}

// commProgress is how far a rank got on one communicator.
type commProgress struct {
	Issued   uint64 `json:"issued,omitempty"`   // the last sequence number handed to NCCL
	Finished uint64 `json:"finished,omitempty"` // the last one completed
}

// notice is a failure that ends the job, as the failing rank wrote it.
type notice struct {
	From    int       `json:"from"`    // world rank
	Timeout bool      `json:"timeout"` // a timeout (else a failure)
	Group   string    `json:"group"`
	Kind    comm.Kind `json:"kind"`
	Seq     uint64    `json:"seq"`
	Msg     string    `json:"msg"`
	Peers   []int     `json:"peers"` // world ranks at fault
}

func newMonitor(w *World, store Store, every time.Duration) *monitor {
	job := "dszero/nccl/" + hex.EncodeToString(w.opts.ID[:8]) + "/"
	m := &monitor{w: w, store: store, every: every, abort: job + "abort",
		keys: func(r int) string { return job + "progress/" + strconv.Itoa(r) },
		stop: make(chan struct{}), done: make(chan struct{})}
	return m
}

func (m *monitor) start() {
	m.publish(false)
	go m.loop()
}

func (m *monitor) loop() {
	defer close(m.done)
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.publish(false)
		m.check()
	}
}

// close stops the heartbeat and publishes that this rank has closed.
func (m *monitor) close() {
	close(m.stop)
	<-m.done
	m.publish(true)
}

func (m *monitor) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), max(10*m.every, 10*time.Second))
}

func (m *monitor) publish(closed bool) {
	m.mu.Lock()
	m.beat++
	rec := progressRec{Beat: m.beat, Closed: closed, Comms: m.w.progress()}
	m.mu.Unlock()
	b, _ := json.Marshal(rec)
	ctx, cancel := m.ctx()
	defer cancel()
	m.store.Set(ctx, m.keys(m.w.opts.Rank), b) // best effort: a missed beat looks like a slow one
}

// check reads the abort key and relays a notice found there.
func (m *monitor) check() {
	ctx, cancel := m.ctx()
	defer cancel()
	vals, err := m.store.MultiGet(ctx, m.abort)
	if err != nil || vals[m.abort] == nil {
		return
	}
	var n notice
	if json.Unmarshal(vals[m.abort], &n) == nil && n.From != m.w.opts.Rank {
		m.w.relay(n)
	}
}

// announce writes a notice for the other ranks, unless one is there.
func (m *monitor) announce(n notice) {
	ctx, cancel := m.ctx()
	defer cancel()
	if vals, err := m.store.MultiGet(ctx, m.abort); err == nil && vals[m.abort] != nil {
		return
	}
	b, _ := json.Marshal(n)
	m.store.Set(ctx, m.abort, b)
}

// stragglers are the members of c that had not issued collective seq,
// with what each was doing; ok is false when the records could not be
// read.
func (m *monitor) stragglers(c *Comm, seq uint64) (out []comm.Straggler, ok bool) {
	var keys []string
	for _, wr := range c.members {
		keys = append(keys, m.keys(wr))
	}
	read := func() (map[int]progressRec, bool) {
		ctx, cancel := m.ctx()
		defer cancel()
		vals, err := m.store.MultiGet(ctx, keys...)
		if err != nil {
			return nil, false
		}
		recs := map[int]progressRec{}
		for i, k := range keys {
			var r progressRec
			if v := vals[k]; v != nil && json.Unmarshal(v, &r) == nil {
				recs[i] = r
			}
		}
		return recs, true
	}
	first, ok1 := read()
	time.Sleep(2 * m.every)
	second, ok2 := read()
	if !ok1 || !ok2 {
		return nil, false
	}
	// Arrival is judged by the first read, taken at the timeout: a rank
	// that arrives during the two heartbeats came too late all the same.
	// The second read says only whether each rank is alive.
	for i := range c.members {
		if i == c.rank {
			continue
		}
		r0, had := first[i]
		r, has := second[i]
		if !has {
			out = append(out, comm.Straggler{Rank: i, State: "it never published its progress (not started, or running without the job's store)"})
			continue
		}
		if !had {
			r0 = r
		}
		if p, known := r0.Comms[c.id]; known && p.Issued >= seq {
			continue // arrived
		}
		p, known := r0.Comms[c.id]
		var state string
		switch {
		case r.Closed:
			state = fmt.Sprintf("exited: it closed its communicators%s", lastHere(p, known))
		case !known:
			state = "it has not created this communicator"
		case r.Beat > first[i].Beat:
			state = "busy" + lastHere(p, known)
		default:
			state = "stopped or hung: its heartbeat stopped" + lastHere(p, known)
		}
		out = append(out, comm.Straggler{Rank: i, State: state})
	}
	return out, true
}

// lastHere is ": its last collective here is #n" ("…issued none here").
func lastHere(p commProgress, known bool) string {
	switch {
	case !known:
		return ""
	case p.Issued == 0:
		return ": it has issued no collective here"
	}
	return fmt.Sprintf(": its last collective here is #%d", p.Issued)
}
