// Package shutdown owns how a process answers SIGINT and SIGTERM. The first one starts a
// graceful shutdown: the context ends, its cause naming the signal. A second one, while that
// shutdown runs, ends the process at once (exit status 1) for an operator who will not wait;
// what the drain would have finished is then left as after a crash (events wait in the Redis
// outbox, offsets stay uncommitted, a batch run stays running until the next one).
package shutdown

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// SignalError is the cause of the context OnSignal returns once a signal arrived.
type SignalError struct{ Signal os.Signal }

func (e *SignalError) Error() string { return "received " + e.Signal.String() }

// OnSignal returns a context that ends at the first SIGINT or SIGTERM; a second one exits
// the process at once. stop stops listening (signals get their default action again).
func OnSignal(parent context.Context) (ctx context.Context, stop func()) {
	return onSignal(parent, func() { os.Exit(1) }, os.Interrupt, syscall.SIGTERM)
}

func onSignal(parent context.Context, exit func(), sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case s := <-ch:
			cancel(&SignalError{Signal: s})
		case <-done:
			return
		}
		select {
		case s := <-ch:
			slog.Error("second signal during shutdown: exiting now, without finishing it", "signal", s.String())
			exit()
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			wg.Wait()
			cancel(context.Canceled)
		})
	}
}
