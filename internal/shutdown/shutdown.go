// Package shutdown owns how a process answers SIGINT and SIGTERM: the first ends the context
// (its cause names the signal) for a graceful shutdown; a second exits at once (status 1),
// leaving what the drain would have finished as a crash would.
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
