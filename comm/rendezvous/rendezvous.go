package rendezvous

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dszero/dszero/comm"
)

// The ways a rendezvous fails. Test with errors.Is; every rank that learns
// of a problem returns an error matching the same one.
var (
	// ErrNoMaster: rank 0's store could not be reached.
	ErrNoMaster = errors.New("rank 0's store unreachable")
	// ErrWorldSize: a rank's WORLD_SIZE differs from rank 0's.
	ErrWorldSize = errors.New("WORLD_SIZE mismatch")
	// ErrDuplicate: two processes registered the same RANK.
	ErrDuplicate = errors.New("duplicate rank")
	// ErrMissing: ranks did not arrive within the timeout (ErrTimeout
	// matches too).
	ErrMissing = errors.New("ranks missing")
	// ErrEnv: the environment cannot run a rendezvous (no MASTER_ADDR).
	ErrEnv = errors.New("no rendezvous address")
)

// Options configure Rendezvous.
type Options struct {
	// Timeout bounds connecting to rank 0's store and waiting for every
	// rank to arrive; zero is comm.DefaultTimeout (torch's default
	// init_process_group timeout).
	Timeout time.Duration
	// Blob, called on rank 0 only, makes the bytes handed to every rank
	// (the NCCL unique id). Nil hands out nothing.
	Blob func() ([]byte, error)
	// Host names this machine in registrations and messages; "" is
	// os.Hostname.
	Host string
}

// Member is one rank's registration.
type Member struct {
	Rank           int    `json:"rank"`
	WorldSize      int    `json:"world_size"`
	LocalRank      int    `json:"local_rank"`
	LocalWorldSize int    `json:"local_world_size"`
	Host           string `json:"host"`
	PID            int    `json:"pid"`
}

func (m Member) String() string { return fmt.Sprintf("rank %d (%s, pid %d)", m.Rank, m.Host, m.PID) }

// Session is a completed rendezvous.
type Session struct {
	Env     comm.Env
	Addr    string   // MASTER_ADDR:MASTER_PORT; "" for a one-rank job without a store
	Blob    []byte   // rank 0's blob, the same on every rank
	Members []Member // every rank's registration, by rank
	// Store is this rank's client of rank 0's store (nil without one). It
	// stays open until Close: later steps use the store too.
	Store *Client

	server *Server // rank 0's
}

// Keys of the handshake.
const (
	keyPrefix   = "dszero/rdv/"
	keyWorld    = keyPrefix + "world"  // rank 0's WORLD_SIZE
	keyBlob     = keyPrefix + "blob"   // rank 0's blob
	keyAbort    = keyPrefix + "abort"  // a problem one rank found, as an abortNote
	keyClosed   = keyPrefix + "closed" // counter of ranks that closed
	keyAll      = keyPrefix + "all-closed"
	keyFailSeen = keyPrefix + "failed"     // counter of ranks that failed
	keyFailAll  = keyPrefix + "all-failed" // every rank has
)

func keyRank(r int) string      { return keyPrefix + "rank/" + strconv.Itoa(r) }
func keyRankCount(r int) string { return keyPrefix + "count/" + strconv.Itoa(r) }

// abortNote is what a rank that found a problem writes under keyAbort.
type abortNote struct {
	From int    `json:"from"` // the rank that found it
	Kind string `json:"kind"` // the error kind's name
	Msg  string `json:"msg"`
}

var kinds = map[string]error{"world-size": ErrWorldSize, "duplicate": ErrDuplicate, "missing": ErrMissing}

// Error is a failed rendezvous as one rank saw it.
type Error struct {
	Rank int    // the reporting rank
	Msg  string // what is wrong and what to do
	Kind error  // ErrNoMaster, ErrWorldSize, ErrDuplicate, ErrMissing, ErrEnv
	Err  error  // the underlying error, if any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("rendezvous (rank %d): %s", e.Rank, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() []error {
	errs := []error{e.Kind}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.Kind == ErrMissing {
		errs = append(errs, ErrTimeout)
	}
	return errs
}

// Rendezvous runs the handshake for this process's place in the job, env
// (comm.ParseEnv of the launcher's variables). Rank 0 serves the store at
// MASTER_ADDR:MASTER_PORT; every rank connects, registers, and waits for
// the others and for rank 0's blob (see the package documentation). A
// one-rank job without MASTER_ADDR needs no store: its session holds the
// blob alone.
func Rendezvous(ctx context.Context, env comm.Env, opts Options) (*Session, error) {
	timeout, err := comm.CheckTimeout("rendezvous: timeout", opts.Timeout)
	if err != nil {
		return nil, err
	}
	host := opts.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	me := Member{Rank: env.Rank, WorldSize: env.WorldSize, LocalRank: env.LocalRank, LocalWorldSize: env.LocalWorldSize, Host: host, PID: os.Getpid()}
	s := &Session{Env: env}
	if env.MasterAddr == "" || env.MasterPort == 0 {
		if env.WorldSize > 1 {
			return nil, &Error{Rank: env.Rank, Kind: ErrEnv, Msg: fmt.Sprintf("rank %d of %d: MASTER_ADDR and MASTER_PORT are not set; torchrun and the deepspeed launcher set them, otherwise export MASTER_ADDR=<rank 0's address> MASTER_PORT=<a free port> on every rank", env.Rank, env.WorldSize)}
		}
		if s.Blob, err = makeBlob(opts.Blob); err != nil {
			return nil, err
		}
		s.Members = []Member{me}
		return s, nil
	}
	s.Addr = net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort))
	r := &run{s: s, me: me, timeout: timeout, opts: opts}
	if err := r.handshake(ctx); err != nil {
		r.failed(ctx)
		return nil, err
	}
	return s, nil
}

// failGrace bounds how long rank 0 keeps serving the store after a failed
// rendezvous, for the ranks that have not yet read why it failed.
const failGrace = 30 * time.Second

// failed ends a failed handshake. Every rank counts itself as having seen
// the failure; rank 0 keeps serving until all of them have (or a grace
// period passes), so that a slower rank reads the reason instead of
// finding no store.
func (r *run) failed(ctx context.Context) {
	s := r.s
	if s.Store != nil {
		world := r.world
		if world == 0 {
			world = r.me.WorldSize
		}
		if n, err := s.Store.Add(ctx, keyFailSeen, 1); err == nil && int(n) >= world {
			s.Store.Set(ctx, keyFailAll, nil)
		}
		if s.server != nil {
			s.Store.Wait(ctx, []string{keyFailAll}, "", min(r.timeout, failGrace))
		}
		s.Store.Close()
	}
	if s.server != nil {
		s.server.Close()
	}
}

func makeBlob(f func() ([]byte, error)) ([]byte, error) {
	if f == nil {
		return nil, nil
	}
	b, err := f()
	if err != nil {
		return nil, fmt.Errorf("rendezvous: making rank 0's blob: %w", err)
	}
	return b, nil
}

// run is one handshake in progress.
type run struct {
	s       *Session
	me      Member
	timeout time.Duration
	opts    Options
	start   time.Time
	world   int // rank 0's world size, once known
}

func (r *run) fail(kind error, err error, format string, args ...any) *Error {
	return &Error{Rank: r.me.Rank, Kind: kind, Msg: fmt.Sprintf(format, args...), Err: err}
}

// left is the time left of the timeout.
func (r *run) left() time.Duration { return max(time.Millisecond, r.timeout-time.Since(r.start)) }

func (r *run) handshake(ctx context.Context) error {
	r.start = time.Now()
	s, me := r.s, r.me
	if me.Rank == 0 {
		srv, err := Listen(bindAddr(s.Env.MasterAddr, s.Env.MasterPort))
		if err != nil {
			return &Error{Rank: 0, Kind: ErrNoMaster, Msg: "rank 0 cannot serve the store", Err: err}
		}
		s.server = srv
	}
	c, err := Dial(ctx, s.Addr, r.timeout)
	if err != nil {
		var ns *NoStoreError
		if errors.As(err, &ns) {
			return r.fail(ErrNoMaster, err, "rank %d of %d could not reach rank 0's store at MASTER_ADDR:MASTER_PORT = %s; "+
				"rank 0 serves it: check that rank 0 was started, that MASTER_ADDR and MASTER_PORT are the same on every rank, and that the port is reachable from %s",
				me.Rank, me.WorldSize, s.Addr, me.Host)
		}
		return r.fail(ErrNoMaster, err, "connecting to %s", s.Addr)
	}
	s.Store = c
	if me.Rank == 0 {
		blob, err := makeBlob(r.opts.Blob)
		if err != nil {
			return err
		}
		if blob == nil {
			blob = []byte{}
		}
		if err := c.Set(ctx, keyBlob, blob); err != nil {
			return err
		}
		if err := c.Set(ctx, keyWorld, []byte(strconv.Itoa(me.WorldSize))); err != nil {
			return err
		}
	}
	n, err := c.Add(ctx, keyRankCount(me.Rank), 1)
	if err != nil {
		return err
	}
	if n > 1 {
		return r.abort(ctx, "duplicate", "rank %d registered twice: two processes were started with RANK=%d (the later one is %v); give each process its own RANK in 0..WORLD_SIZE-1",
			me.Rank, me.Rank, me)
	}
	// Rank 0's world size and blob.
	if err := r.waitFor(ctx, []string{keyWorld, keyBlob}, "rank 0's world size"); err != nil {
		return err
	}
	got, err := c.MultiGet(ctx, keyWorld, keyBlob)
	if err != nil {
		return err
	}
	world, err := strconv.Atoi(string(got[keyWorld]))
	if err != nil {
		return fmt.Errorf("rendezvous: store %s holds %q as rank 0's world size: %w", s.Addr, got[keyWorld], err)
	}
	r.world = world
	if world != me.WorldSize {
		return r.abort(ctx, "world-size", "%v has WORLD_SIZE=%d but rank 0 has WORLD_SIZE=%d; start every rank with the same WORLD_SIZE (torchrun: the same --nnodes and --nproc_per_node on every node)",
			me, me.WorldSize, world)
	}
	s.Blob = got[keyBlob]
	// Registered only now, so that the others never count a rank whose
	// world size is wrong.
	reg, _ := json.Marshal(me)
	if err := c.Set(ctx, keyRank(me.Rank), reg); err != nil {
		return err
	}
	// Every rank.
	keys := make([]string, world)
	for i := range keys {
		keys[i] = keyRank(i)
	}
	if err := r.waitFor(ctx, keys, "every rank"); err != nil {
		return err
	}
	regs, err := c.MultiGet(ctx, keys...)
	if err != nil {
		return err
	}
	s.Members = make([]Member, world)
	for i, k := range keys {
		if err := json.Unmarshal(regs[k], &s.Members[i]); err != nil {
			return fmt.Errorf("rendezvous: store %s: the registration of rank %d: %w", s.Addr, i, err)
		}
	}
	return nil
}

// waitFor waits for keys, failing with the problem another rank wrote
// under the abort key, or, at the timeout, naming the ranks that did not
// register.
func (r *run) waitFor(ctx context.Context, keys []string, what string) error {
	note, err := r.s.Store.Wait(ctx, keys, keyAbort, r.left())
	var te *TimeoutError
	switch {
	case errors.As(err, &te):
		return r.timedOut(ctx, te)
	case err != nil:
		return err
	case note != nil:
		var a abortNote
		if json.Unmarshal(note, &a) != nil || kinds[a.Kind] == nil {
			return r.fail(ErrMissing, nil, "waiting for %s: the store holds an unreadable abort note %q", what, note)
		}
		return &Error{Rank: r.me.Rank, Kind: kinds[a.Kind], Msg: fmt.Sprintf("rank %d stopped the rendezvous: %s", a.From, a.Msg)}
	}
	return nil
}

// timedOut is the error of a wait that timed out; it tells the other
// ranks too.
func (r *run) timedOut(ctx context.Context, te *TimeoutError) error {
	var missing []int
	for _, k := range te.Missing {
		if k == keyWorld || k == keyBlob {
			return r.abort(ctx, "missing", "rank 0 serves the store at %s but did not publish its world size within %v", r.s.Addr, r.timeout)
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(k, keyPrefix+"rank/")); err == nil {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	return r.abort(ctx, "missing", "timed out after %v at %s: %s of %d never arrived (not started, failed before the rendezvous, or started with another MASTER_ADDR:MASTER_PORT)",
		r.timeout, r.s.Addr, ranksText(missing), r.me.WorldSize)
}

// abort writes the problem for the other ranks (the first note wins) and
// returns it as this rank's error.
func (r *run) abort(ctx context.Context, kind, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	note, _ := json.Marshal(abortNote{From: r.me.Rank, Kind: kind, Msg: msg})
	if ok, err := r.s.Store.Check(ctx, keyAbort); err == nil && !ok {
		r.s.Store.Set(ctx, keyAbort, note) // best effort: this rank's error stands either way
	}
	return &Error{Rank: r.me.Rank, Kind: kinds[kind], Msg: msg}
}

// ranksText is "rank 2" or "ranks 2, 3".
func ranksText(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = strconv.Itoa(r)
	}
	if len(parts) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// bindAddr is where rank 0 listens: the loopback address itself when
// MASTER_ADDR is one (nothing outside the machine can reach the store
// then), every interface otherwise, as torch's TCPStore does.
func bindAddr(host string, port int) string {
	p := strconv.Itoa(port)
	if host == "localhost" {
		return net.JoinHostPort("127.0.0.1", p)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return net.JoinHostPort(host, p)
	}
	return net.JoinHostPort("", p)
}

// Close ends this rank's part: it counts itself closed in the store and
// closes its connection. Rank 0 first waits until every rank has closed
// (or ctx ends), since the others may still use the store, then stops
// serving.
func (s *Session) Close(ctx context.Context) error {
	if s.Store == nil {
		return nil
	}
	var errs []error
	n, err := s.Store.Add(ctx, keyClosed, 1)
	errs = append(errs, err)
	if err == nil && int(n) == len(s.Members) {
		// The last to close tells rank 0, which may stop serving before
		// this request's answer is sent: its error means nothing.
		s.Store.Set(ctx, keyAll, nil)
	}
	if s.server != nil && err == nil {
		if _, err := s.Store.Wait(ctx, []string{keyAll}, "", 0); err != nil && ctx.Err() == nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.Store.Close())
	if s.server != nil {
		errs = append(errs, s.server.Close())
	}
	return errors.Join(errs...)
}
