package rendezvous

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func serve(t *testing.T) (*Server, *Client) {
	t.Helper()
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dial(t, s)
}

func dial(t *testing.T, s *Server) *Client {
	t.Helper()
	c, err := Dial(context.Background(), s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestStoreSetGetCheckDelete(t *testing.T) {
	ctx := context.Background()
	_, c := serve(t)
	if err := c.Set(ctx, "a", []byte("one")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "a", time.Second)
	if err != nil || string(got) != "one" {
		t.Fatalf("Get(a) = %q, %v; want one", got, err)
	}
	if ok, err := c.Check(ctx, "a", "b"); err != nil || ok {
		t.Fatalf("Check(a, b) = %v, %v; want false (b is absent)", ok, err)
	}
	c.Set(ctx, "b", nil)
	if ok, _ := c.Check(ctx, "a", "b"); !ok {
		t.Fatal("Check(a, b) = false after both were set (an empty value counts)")
	}
	vals, err := c.MultiGet(ctx, "a", "b", "c")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]byte{"a": []byte("one"), "b": nil}, vals); d != "" {
		t.Errorf("MultiGet (-want +got):\n%s", d)
	}
	c.Delete(ctx, "a")
	if ok, _ := c.Check(ctx, "a"); ok {
		t.Error("a is still there after Delete")
	}
}

func TestStoreGetWaitsForSet(t *testing.T) {
	ctx := context.Background()
	s, c := serve(t)
	other := dial(t, s)
	done := make(chan []byte)
	go func() {
		v, err := c.Get(ctx, "late", time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	// The waiting Get must not block other clients.
	if err := other.Set(ctx, "late", []byte("here")); err != nil {
		t.Fatal(err)
	}
	if v := <-done; string(v) != "here" {
		t.Fatalf("Get = %q, want here", v)
	}
}

func TestStoreTimeoutNamesMissingKeys(t *testing.T) {
	ctx := context.Background()
	_, c := serve(t)
	c.Set(ctx, "k1", nil)
	_, err := c.Wait(ctx, []string{"k1", "k2", "k3"}, "", 50*time.Millisecond)
	var te *TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait = %v, want a *TimeoutError", err)
	}
	if d := cmp.Diff([]string{"k2", "k3"}, te.Missing); d != "" {
		t.Errorf("missing keys (-want +got):\n%s", d)
	}
	if _, err := c.Get(ctx, "nope", 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("Get of an absent key = %v, want a timeout", err)
	}
	// The connection is still usable after a timed-out wait.
	if err := c.Set(ctx, "k2", nil); err != nil {
		t.Fatal(err)
	}
}

func TestStoreWaitStopsAtAbortKey(t *testing.T) {
	ctx := context.Background()
	s, c := serve(t)
	other := dial(t, s)
	done := make(chan []byte)
	go func() {
		note, err := c.Wait(ctx, []string{"never"}, "abort", time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- note
	}()
	other.Set(ctx, "abort", []byte("stop"))
	if note := <-done; string(note) != "stop" {
		t.Fatalf("Wait returned note %q, want stop", note)
	}
}

func TestStoreAddCounts(t *testing.T) {
	ctx := context.Background()
	s, _ := serve(t)
	const n, each = 4, 25
	var wg sync.WaitGroup
	for range n {
		c := dial(t, s)
		wg.Go(func() {
			for range each {
				if _, err := c.Add(ctx, "ctr", 1); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	c := dial(t, s)
	got, err := c.Add(ctx, "ctr", 0)
	if err != nil || got != n*each {
		t.Fatalf("counter = %d, %v; want %d", got, err, n*each)
	}
	c.Set(ctx, "text", []byte("x"))
	if _, err := c.Add(ctx, "text", 1); err == nil {
		t.Error("Add to a non-numeric value succeeded")
	}
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestDialRetriesUntilTheServerListens(t *testing.T) {
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dialed := make(chan error)
	go func() {
		c, err := Dial(context.Background(), addr, time.Minute)
		if err == nil {
			err = c.Set(context.Background(), "x", nil)
			c.Close()
		}
		dialed <- err
	}()
	time.Sleep(100 * time.Millisecond) // let a few attempts fail
	s, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := <-dialed; err != nil {
		t.Fatal(err)
	}
}

func TestDialGivesUpNamingTheAddress(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	_, err := Dial(context.Background(), addr, 100*time.Millisecond)
	var ns *NoStoreError
	if !errors.As(err, &ns) || ns.Addr != addr {
		t.Fatalf("Dial = %v, want a *NoStoreError for %s", err, addr)
	}
}

func TestListenOnABusyPortSaysSo(t *testing.T) {
	s, _ := serve(t)
	_, err := Listen(s.Addr().String())
	if err == nil || !containsAll(err.Error(), "in use", "MASTER_PORT") {
		t.Fatalf("Listen on a busy port = %v", err)
	}
}

func TestClosedServerFailsClients(t *testing.T) {
	ctx := context.Background()
	s, c := serve(t)
	done := make(chan error)
	go func() {
		_, err := c.Get(ctx, "never", time.Minute)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	s.Close()
	if err := <-done; err == nil || !containsAll(err.Error(), "rank 0 exit") {
		t.Fatalf("Get across a server close = %v, want a connection error", err)
	}
}
