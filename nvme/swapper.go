package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dszero/dszero/internal/splitmix"
	"github.com/dszero/dszero/mem"
)

// Swapper keeps one rank's swapped tensors in files, one per key, under
// <nvme_path>/dszero_rank<R>/<name>, and moves them through a pool of
// aligned buffers with asynchronous I/O. See the package documentation.
//
// Requests on one key run in the order they were issued (a Read issued
// after a Write reads what was written); requests on different keys run
// concurrently. A Swapper is safe for concurrent use; a Buffer is not.
type Swapper struct {
	opts     Options
	fs       FS
	acct     *mem.Accountant
	rankDir  string // <Path>/dszero_rank<R>
	dir      string // rankDir, or rankDir/<Name>
	bufBytes int64
	eng      *engine

	mu         sync.Mutex
	cond       sync.Cond // a buffer came back to the pool, or Close began
	bufs       []*Buffer
	free       []*Buffer
	callerHeld int // buffers held by callers: Acquire, or a Read into them
	keys       map[string]*keyState
	closed     bool
	nvmeBytes  int64 // accounted in tier NVMe
	stats      Stats
	pending    sync.WaitGroup // requests issued and not yet completed
}

// keyState is one key's swap file.
type keyState struct {
	path    string
	size    int64 // bytes of the latest write issued
	onDisk  int64 // bytes accounted on NVMe: the largest padded write
	written bool  // a write was issued
	err     error // the latest write failed: reads fail until one succeeds
	// sums are the CRC-32C of each block of the latest write started
	// (checksum.go); the write fills them as its blocks go out, and the
	// reads after it check against them.
	sums    []uint32
	busy    bool // a request on the key is in the engine
	waiting []*request
}

// Stats is what a Swapper has done.
type Stats struct {
	Dir          string // the swap folder
	DirectIO     error  // nil when files bypass the page cache; else why not
	Keys         int    // keys written
	FileBytes    int64  // bytes in swap files (tier NVMe)
	BufferBytes  int64  // bytes of the buffer pool (tier pinned_host)
	Writes       int64  // completed writes
	Reads        int64  // completed reads
	BytesWritten int64  // by completed writes, padded to Align
	BytesRead    int64  // by completed reads, padded to Align
	StaleRemoved int    // swap files of an earlier run removed by New

	PreflightBytes int64         // written by the preflight
	PreflightTime  time.Duration // how long it took
}

const (
	swapSuffix    = ".swp"
	preflightName = ".preflight" + swapSuffix // keys cannot start with '.'
)

// New creates rank's swap folder under opts.Path, removes the swap files
// an earlier run left there, allocates the buffer pool (accounted in the
// pinned-host tier), starts the I/O workers and runs the preflight. A
// missing, unwritable or too small nvme_path fails with a
// *PreflightError. fsys and acct are required.
func New(fsys FS, acct *mem.Accountant, opts Options) (*Swapper, error) {
	if fsys == nil || acct == nil {
		panic("nvme: New needs a filesystem and an accountant")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Swapper{
		opts:     opts,
		fs:       fsys,
		acct:     acct,
		rankDir:  filepath.Join(opts.Path, fmt.Sprintf("dszero_rank%d", opts.Rank)),
		bufBytes: opts.bufferBytes(),
		keys:     map[string]*keyState{},
	}
	s.dir = s.rankDir
	if opts.Name != "" {
		s.dir = filepath.Join(s.rankDir, opts.Name)
	}
	s.cond.L = &s.mu
	s.stats.Dir = s.dir
	for _, d := range []string{s.rankDir, s.dir} {
		if err := fsys.Mkdir(d); err != nil {
			s.removeDirs()
			return nil, preflightError(opts, 0, err)
		}
	}
	if err := s.removeStale(); err != nil {
		s.removeDirs()
		return nil, err
	}
	pool := int64(opts.BufferCount) * s.bufBytes
	if err := acct.Reserve(opts.Category, mem.PinnedHost, pool); err != nil {
		s.removeDirs()
		return nil, fmt.Errorf("nvme: %s swap buffers of %s: %w", opts.key("buffer_count"), mem.FormatBytes(s.bufBytes), err)
	}
	s.stats.BufferBytes = pool
	for i := range opts.BufferCount {
		b := &Buffer{id: i, data: alignedBytes(int(s.bufBytes))}
		s.bufs = append(s.bufs, b)
		s.free = append(s.free, b)
	}
	s.eng = newEngine(int(opts.BlockSize), opts.IntraOpParallelism*opts.QueueDepth)
	if err := s.preflight(); err != nil {
		s.eng.close()
		acct.Release(opts.Category, mem.PinnedHost, pool)
		s.removeDirs()
		return nil, err
	}
	return s, nil
}

// removeStale removes the swap files an earlier run left in the folder:
// they are never trusted across runs.
func (s *Swapper) removeStale() error {
	names, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return preflightError(s.opts, 0, err)
	}
	for _, name := range names {
		if !strings.HasSuffix(name, swapSuffix) {
			continue
		}
		if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil {
			return preflightError(s.opts, 0, fmt.Errorf("removing a stale swap file: %w", err))
		}
		s.stats.StaleRemoved++
	}
	return nil
}

// removeDirs removes the swap folders if they are empty.
func (s *Swapper) removeDirs() error {
	var errs []error
	dirs := []string{s.dir}
	if s.dir != s.rankDir {
		dirs = append(dirs, s.rankDir)
	}
	for _, d := range dirs {
		err := s.fs.Remove(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			errs = append(errs, fmt.Errorf("nvme: removing %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// preflight writes opts.Preflight bytes to a file in the swap folder and
// removes it: the disk must take everything the run will put there.
func (s *Swapper) preflight() error {
	need := roundUp(s.opts.Preflight)
	if need == 0 {
		return nil
	}
	if err := s.acct.Reserve(s.opts.Category, mem.NVMe, need); err != nil {
		return fmt.Errorf("nvme: preflight of %s: %w", s.opts.key("nvme_path"), err)
	}
	defer s.acct.Release(s.opts.Category, mem.NVMe, need)
	path := filepath.Join(s.dir, preflightName)
	f, err := s.fs.OpenFile(path, true)
	if err != nil {
		return preflightError(s.opts, 0, err)
	}
	// The source is one pool buffer (not in use yet) of random bytes: a
	// compressing or deduplicating filesystem must not store zeros for
	// free and pass a preflight that real tensors then fail.
	src := s.bufs[0].data
	for i := 0; i+8 <= len(src); i += 8 {
		binary.LittleEndian.PutUint64(src[i:], splitmix.Mix(uint64(i)*splitmix.Golden))
	}
	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first *IOError
	)
	for off := int64(0); off < need; off += int64(len(src)) {
		wg.Add(1)
		r := &request{write: true, key: "(preflight)", path: path, file: keepOpen{f}, data: src[:min(int64(len(src)), need-off)], base: off}
		r.done = func(err error) {
			var ioe *IOError
			if errors.As(err, &ioe) {
				mu.Lock()
				if first == nil || ioe.Offset < first.Offset {
					first = ioe
				}
				mu.Unlock()
			}
			wg.Done()
		}
		s.eng.run(r)
	}
	wg.Wait()
	elapsed := time.Since(start)
	cerr := f.Close()
	rerr := s.fs.Remove(path)
	switch {
	case first != nil:
		return preflightError(s.opts, first.Offset, first.Err)
	case cerr != nil:
		return preflightError(s.opts, need, cerr)
	case rerr != nil:
		return preflightError(s.opts, need, rerr)
	}
	s.stats.PreflightBytes, s.stats.PreflightTime = need, elapsed
	return nil
}

// keepOpen lets many requests share one file; its owner closes it.
type keepOpen struct{ File }

func (keepOpen) Close() error { return nil }

// Dir is the folder the swap files are in.
func (s *Swapper) Dir() string { return s.dir }

// Path is the swap file of key (whether or not it has been written):
// what errors about the key's data name.
func (s *Swapper) Path(key string) string {
	checkKey(key)
	return filepath.Join(s.dir, key+swapSuffix)
}

// BufferBytes is the capacity of one swap buffer.
func (s *Swapper) BufferBytes() int { return int(s.bufBytes) }

// BufferCount is the number of swap buffers in the pool (buffer_count).
// A caller that holds buffers across calls (reads ahead with Prefetch)
// should hold fewer than all of them, so that SwapIn and SwapOut always
// find one.
func (s *Swapper) BufferCount() int { return len(s.bufs) }

// Stats returns what the swapper has done so far.
func (s *Swapper) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	st.Keys = len(s.keys)
	st.FileBytes = s.nvmeBytes
	s.mu.Unlock()
	st.DirectIO = s.fs.DirectIO()
	return st
}

// validKey reports whether key can name a swap file: 1 to 200 of
// [A-Za-z0-9._-], not starting with a dot.
func validKey(key string) bool {
	if key == "" || len(key) > 200 || key[0] == '.' {
		return false
	}
	for _, c := range []byte(key) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func checkKey(key string) {
	if !validKey(key) {
		panic(fmt.Sprintf("nvme: key %q is not 1 to 200 of [A-Za-z0-9._-] starting with no dot", key))
	}
}

// Close waits for every request in flight, removes the swap files and
// the swap folder, and returns the buffers and the file bytes to the
// accountant. Buffers must not be used after Close.
func (s *Swapper) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.cond.Broadcast() // Acquire calls waiting for a buffer fail now
	s.pending.Wait()
	s.eng.close()

	var errs []error
	paths := make([]string, 0, len(s.keys))
	for _, ks := range s.keys {
		paths = append(paths, ks.path)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("nvme: removing swap file: %w", err))
		}
	}
	errs = append(errs, s.removeDirs())
	s.acct.Release(s.opts.Category, mem.NVMe, s.nvmeBytes)
	s.acct.Release(s.opts.Category, mem.PinnedHost, s.stats.BufferBytes)
	s.nvmeBytes = 0
	return errors.Join(errs...)
}
