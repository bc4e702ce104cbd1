package rendezvous

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The operations of the wire protocol.
const (
	opSet      = "set"
	opGet      = "get"      // wait for one key
	opWait     = "wait"     // wait for every key, or the abort key
	opAdd      = "add"      // decimal counter
	opCheck    = "check"    // are all keys present (no wait)
	opMultiGet = "multiget" // the present keys' values (no wait)
	opDelete   = "delete"
)

// request is one client call on the wire.
type request struct {
	Op      string   `json:"op"`
	Key     string   `json:"key,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	Value   []byte   `json:"value,omitempty"`
	Delta   int64    `json:"delta,omitempty"`
	Abort   string   `json:"abort,omitempty"`   // wait: stop early when this key appears
	Timeout int64    `json:"timeout,omitempty"` // get, wait: in milliseconds
}

// response is the server's answer to one request.
type response struct {
	Err     string            `json:"err,omitempty"`     // a refused request
	Value   []byte            `json:"value,omitempty"`   // get; wait: the abort key's value
	Values  map[string][]byte `json:"values,omitempty"`  // multiget
	N       int64             `json:"n,omitempty"`       // add
	OK      bool              `json:"ok,omitempty"`      // check; wait: all present; get: found
	Aborted bool              `json:"aborted,omitempty"` // wait: the abort key appeared
	Missing []string          `json:"missing,omitempty"` // get, wait after a timeout
}

// Server is the store: a key-value map served over TCP, one goroutine per
// connection. Waits are served here, so a waiting client costs no
// traffic until its keys appear or its timeout passes.
type Server struct {
	ln net.Listener

	mu      sync.Mutex
	data    map[string][]byte
	changed chan struct{} // closed and replaced on every change
	conns   map[net.Conn]bool
	closed  bool

	wg sync.WaitGroup
}

// Listen serves a store on addr ("host:port"; port 0 picks a free one).
// A port already in use gives an error that says so.
func Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("rendezvous: serving the store on %s: the port is in use (another job, or a rank 0 still running from an earlier one?); set MASTER_PORT to a free port: %w", addr, err)
		}
		return nil, fmt.Errorf("rendezvous: serving the store on %s: %w", addr, err)
	}
	s := &Server{ln: ln, data: map[string][]byte{}, changed: make(chan struct{}), conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Port is the port the server listens on.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops serving: the listener and every connection close, and
// waiting requests end. It waits for the connection goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	close(s.changed) // wake every waiter; they see closed
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve answers one connection's requests in order until it closes.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	dec := json.NewDecoder(bufio.NewReader(c))
	enc := json.NewEncoder(c)
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return
		}
		resp, ok := s.handle(&req)
		if !ok {
			return // closed while waiting
		}
		if err := enc.Encode(resp); err != nil {
			return
		}
	}
}

// handle runs one request; ok is false when the server closed meanwhile.
func (s *Server) handle(req *request) (resp response, ok bool) {
	switch req.Op {
	case opSet:
		s.update(func() { s.data[req.Key] = append([]byte(nil), req.Value...) })
	case opAdd:
		var errMsg string
		s.update(func() {
			old := int64(0)
			if v, ok := s.data[req.Key]; ok {
				n, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil {
					errMsg = fmt.Sprintf("add to %q: its value %q is not a counter", req.Key, v)
					return
				}
				old = n
			}
			resp.N = old + req.Delta
			s.data[req.Key] = []byte(strconv.FormatInt(resp.N, 10))
		})
		resp.Err = errMsg
	case opDelete:
		s.update(func() { delete(s.data, req.Key) })
	case opCheck:
		s.mu.Lock()
		resp.OK = len(s.missingLocked(req.Keys)) == 0
		s.mu.Unlock()
	case opMultiGet:
		s.mu.Lock()
		resp.Values = map[string][]byte{}
		for _, k := range req.Keys {
			if v, ok := s.data[k]; ok {
				resp.Values[k] = v
			}
		}
		s.mu.Unlock()
	case opGet, opWait:
		keys := req.Keys
		if req.Op == opGet {
			keys = []string{req.Key}
		}
		return s.wait(req, keys)
	default:
		resp.Err = fmt.Sprintf("unknown operation %q", req.Op)
	}
	return resp, true
}

// update changes the map under the lock and wakes every waiter.
func (s *Server) update(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) missingLocked(keys []string) []string {
	var missing []string
	for _, k := range keys {
		if _, ok := s.data[k]; !ok {
			missing = append(missing, k)
		}
	}
	return missing
}

// wait answers get and wait: once every key is present, once the abort
// key is, or at the timeout, listing the keys still missing.
func (s *Server) wait(req *request, keys []string) (response, bool) {
	var deadline <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(time.Duration(req.Timeout) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return response{}, false
		}
		var resp response
		if v, ok := s.data[req.Abort]; ok && req.Abort != "" {
			resp.Aborted, resp.Value = true, v
			s.mu.Unlock()
			return resp, true
		}
		missing := s.missingLocked(keys)
		if len(missing) == 0 {
			resp.OK = true
			if req.Op == opGet {
				resp.Value = s.data[req.Key]
			}
			s.mu.Unlock()
			return resp, true
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			return response{Missing: missing}, true
		}
	}
}
