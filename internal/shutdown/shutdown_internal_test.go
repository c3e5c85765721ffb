package shutdown

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// The first signal ends the context (its cause names the signal) and leaves the process to
// its shutdown; a second one exits at once instead of being swallowed.
func TestSecondSignalExits(t *testing.T) {
	exited := make(chan struct{})
	// SIGUSR1 stands for SIGTERM: the same path, and the test binary cannot be stopped by it
	// while it is caught.
	ctx, stop := onSignal(context.Background(), func() { close(exited) }, syscall.SIGUSR1)
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the first signal did not end the context")
	}
	var sig *SignalError
	if !errors.As(context.Cause(ctx), &sig) || sig.Signal != syscall.SIGUSR1 {
		t.Fatalf("cause %v; want the signal", context.Cause(ctx))
	}
	select {
	case <-exited:
		t.Fatal("the first signal exited the process")
	default:
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("a second signal during the shutdown did not exit the process")
	}
}
