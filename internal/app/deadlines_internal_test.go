package app

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// coarsePair is a TCP connection through a CoarseDeadlines listener whose watch never sweeps
// by itself (tests call sweep with the time they choose): the server's end and the client's.
func coarsePair(t *testing.T) (*coarseListener, *coarseConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := CoarseDeadlines(ln, time.Hour).(*coarseListener)
	t.Cleanup(func() { l.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return l, c.(*coarseConn), client
}

// readResult reads one byte in the background; the error (nil: a byte came) arrives on the
// channel.
func readResult(c net.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		done <- err
	}()
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second): // a bound on the test, not the claim
		t.Fatal("the read is still blocked")
		return nil
	}
}

func TestCoarseDeadlineFailsABlockedReadAtTheSweep(t *testing.T) {
	l, c, client := coarsePair(t)
	at := time.Now().Add(time.Minute)
	if err := c.SetReadDeadline(at); err != nil {
		t.Fatal(err)
	}
	done := readResult(c)
	l.sweep(at.Add(-time.Millisecond).UnixNano()) // not yet
	l.sweep(at.UnixNano())
	if err := wait(t, done); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	// A new deadline (none) makes the connection readable again.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done = readResult(c)
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, done); err != nil {
		t.Fatalf("read after the deadline was cleared: %v", err)
	}
}

func TestCoarseDeadlineReplacedBeforeTheSweepDoesNotFire(t *testing.T) {
	l, c, client := coarsePair(t)
	first := time.Now().Add(time.Minute)
	if err := c.SetReadDeadline(first); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(first.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	l.sweep(first.Add(time.Second).UnixNano())
	done := readResult(c)
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, done); err != nil {
		t.Fatalf("read under a later deadline: %v", err)
	}
}

// net/http interrupts a blocked read by setting a deadline in the past: at once, no sweep.
func TestCoarseDeadlineInThePastAppliesAtOnce(t *testing.T) {
	_, c, _ := coarsePair(t)
	done := readResult(c)
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, done); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read under a past deadline: %v, want a timeout", err)
	}
}

func TestCoarseWriteDeadline(t *testing.T) {
	l, c, _ := coarsePair(t)
	at := time.Now().Add(time.Minute)
	if err := c.SetWriteDeadline(at); err != nil {
		t.Fatal(err)
	}
	l.sweep(at.UnixNano())
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v, want a timeout", err)
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("write after the deadline was cleared: %v", err)
	}
}

// The watch ends once the listener and every connection it accepted are closed.
func TestCoarseDeadlineWatchEnds(t *testing.T) {
	l, c, _ := coarsePair(t)
	now := time.Now().UnixNano()
	if !l.sweep(now) {
		t.Fatal("the watch ended with the listener open")
	}
	l.Close()
	if !l.sweep(now) {
		t.Fatal("the watch ended with a connection open")
	}
	c.Close()
	if l.sweep(now) {
		t.Fatal("the watch goes on with nothing to watch")
	}
}

// Deadlines set from many goroutines while sweeps run (run with -race).
func TestCoarseDeadlineConcurrent(t *testing.T) {
	l, c, _ := coarsePair(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				at := time.Now().Add(time.Duration(i%3) * time.Hour)
				if (i+g)%5 == 0 {
					at = time.Time{}
				}
				_ = c.SetReadDeadline(at)
				_ = c.SetWriteDeadline(at)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 200 {
			l.sweep(time.Now().Add(30 * time.Minute).UnixNano())
		}
	}()
	wg.Wait()
	if err := c.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("write with no deadline after the race: %v", err)
	}
}
