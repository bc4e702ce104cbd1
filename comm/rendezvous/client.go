package rendezvous

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// ioSlack is how much longer than a wait's own timeout a client waits for
// the server's answer before it gives up on the connection.
const ioSlack = 10 * time.Second

// requestTimeout bounds a request that does not wait (set, add, check).
const requestTimeout = time.Minute

// Client is one connection to a store. Its methods are safe for
// concurrent use and run one at a time; a goroutine that must not queue
// behind another's long wait dials a Client of its own.
type Client struct {
	addr string

	mu     sync.Mutex
	conn   net.Conn
	enc    *json.Encoder
	dec    *json.Decoder
	broken error // set once the connection failed; every later call returns it
}

// TimeoutError is a wait that ended before its keys appeared.
type TimeoutError struct {
	Addr    string
	After   time.Duration
	Missing []string // the keys still absent
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("rendezvous: store %s: timed out after %v waiting for %s", e.Addr, e.After, strings.Join(e.Missing, ", "))
}

// ErrTimeout is what a *TimeoutError matches with errors.Is.
var ErrTimeout = errors.New("rendezvous timeout")

func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// NoStoreError is a store that could not be reached before the deadline.
type NoStoreError struct {
	Addr  string
	After time.Duration
	Err   error // the last connection error
}

func (e *NoStoreError) Error() string {
	return fmt.Sprintf("rendezvous: no store at %s after trying for %v (%v)", e.Addr, e.After, e.Err)
}

func (e *NoStoreError) Unwrap() error { return e.Err }

// Dial connects to the store at addr, retrying until ctx ends or timeout
// passes, so that a rank may start before rank 0 serves the store. It
// returns a *NoStoreError when it never connects.
func Dial(parent context.Context, addr string, timeout time.Duration) (*Client, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	wait := 20 * time.Millisecond
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return &Client{addr: addr, conn: c, enc: json.NewEncoder(c), dec: json.NewDecoder(bufio.NewReader(c))}, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if perr := parent.Err(); perr != nil {
				return nil, fmt.Errorf("rendezvous: connecting to the store at %s: %w", addr, perr)
			}
			return nil, &NoStoreError{Addr: addr, After: time.Since(start).Round(time.Millisecond), Err: lastDialErr(err)}
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// lastDialErr strips the "dial tcp …:" prefix that net adds, for messages
// that name the address already.
func lastDialErr(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// Addr is the store's address.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return nil // closed already, by Close or by a failed request
	}
	c.broken = errors.New("rendezvous: client closed")
	return c.conn.Close()
}

// do sends one request and reads its answer, within wait plus the I/O
// slack, or until ctx ends (which breaks the connection: the answer
// would arrive out of turn).
func (c *Client) do(ctx context.Context, req request, wait time.Duration) (response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return response{}, c.broken
	}
	if err := ctx.Err(); err != nil {
		return response{}, fmt.Errorf("rendezvous: store %s: %s: %w", c.addr, req.Op, err)
	}
	var deadline time.Time // none for a wait without timeout
	if wait > 0 {
		deadline = time.Now().Add(wait + ioSlack)
	}
	c.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var resp response
	err := c.enc.Encode(req)
	if err == nil {
		err = c.dec.Decode(&resp)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		c.broken = fmt.Errorf("rendezvous: store %s: %s: the connection failed (did rank 0 exit?): %w", c.addr, req.Op, err)
		c.conn.Close()
		return response{}, c.broken
	}
	if resp.Err != "" {
		return response{}, fmt.Errorf("rendezvous: store %s: %s", c.addr, resp.Err)
	}
	return resp, nil
}

// Set writes key.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	_, err := c.do(ctx, request{Op: opSet, Key: key, Value: value}, requestTimeout)
	return err
}

// Get waits up to timeout (0: without limit) for key to exist and returns
// its value; a *TimeoutError when it does not appear.
func (c *Client) Get(ctx context.Context, key string, timeout time.Duration) ([]byte, error) {
	resp, err := c.do(ctx, request{Op: opGet, Key: key, Timeout: millis(timeout)}, timeout)
	if err != nil {
		return nil, err
	}
	if !resp.OK {
		return nil, &TimeoutError{Addr: c.addr, After: timeout, Missing: resp.Missing}
	}
	return resp.Value, nil
}

// Wait waits up to timeout until every key exists. When abort is not ""
// and that key appears first, Wait returns at once with its value. A
// *TimeoutError lists the keys still missing.
func (c *Client) Wait(ctx context.Context, keys []string, abort string, timeout time.Duration) (aborted []byte, err error) {
	resp, err := c.do(ctx, request{Op: opWait, Keys: keys, Abort: abort, Timeout: millis(timeout)}, timeout)
	switch {
	case err != nil:
		return nil, err
	case resp.Aborted:
		if resp.Value == nil {
			resp.Value = []byte{}
		}
		return resp.Value, nil
	case !resp.OK:
		return nil, &TimeoutError{Addr: c.addr, After: timeout, Missing: resp.Missing}
	}
	return nil, nil
}

// Add adds delta to the decimal counter at key (absent: 0) and returns
// the new value.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	resp, err := c.do(ctx, request{Op: opAdd, Key: key, Delta: delta}, requestTimeout)
	return resp.N, err
}

// Check reports whether every key exists, without waiting.
func (c *Client) Check(ctx context.Context, keys ...string) (bool, error) {
	resp, err := c.do(ctx, request{Op: opCheck, Keys: keys}, requestTimeout)
	return resp.OK, err
}

// MultiGet returns the values of the keys that exist, without waiting.
func (c *Client) MultiGet(ctx context.Context, keys ...string) (map[string][]byte, error) {
	resp, err := c.do(ctx, request{Op: opMultiGet, Keys: keys}, requestTimeout)
	if resp.Values == nil {
		resp.Values = map[string][]byte{}
	}
	return resp.Values, err
}

// Delete removes key.
func (c *Client) Delete(ctx context.Context, key string) error {
	_, err := c.do(ctx, request{Op: opDelete, Key: key}, requestTimeout)
	return err
}

// millis is d in whole milliseconds, at least 1 for a positive d.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(1, d.Milliseconds())
}
