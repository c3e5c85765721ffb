// Package procs runs flashsale as real processes for the whole-system tests (internal/testing/faults,
// internal/testing/fleet): it builds and starts the api and reconciler, kills them, drives them
// over HTTP as shoppers and an admin (recording every call), and checks a sale's invariants
// against Redis, PostgreSQL and the calls. Test helpers only; nothing outside tests imports it.
package procs

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/metrics"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// Binaries are the api and reconciler executables of this module.
type Binaries struct{ API, Reconciler string }

// Build builds ./cmd/api and ./cmd/reconciler with -race into dir; root is the module's root
// directory (from a package three levels down: "../../.."). For TestMain, before any test runs.
func Build(root, dir string) (Binaries, error) {
	b := Binaries{API: filepath.Join(dir, "api"), Reconciler: filepath.Join(dir, "reconciler")}
	for _, p := range []struct{ out, pkg string }{{b.API, "./cmd/api"}, {b.Reconciler, "./cmd/reconciler"}} {
		cmd := exec.Command("go", "build", "-race", "-o", p.out, p.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", p.pkg, err, out)
		}
	}
	return b, nil
}

// FreePort is a free TCP port on 127.0.0.1 for a process a test starts (testenv.FreePort).
func FreePort(t testing.TB) int {
	t.Helper()
	return testenv.FreePort(t)
}

// WaitFor polls cond until it holds or the deadline passes (a condition, never a fixed time).
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if !Eventually(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Eventually polls cond until it holds (true) or the deadline passes (false); for goroutines
// other than the test's, which must not call t.Fatal.
func Eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// Proc is one real process of ours.
type Proc struct {
	Name  string
	Cmd   *exec.Cmd
	Log   string // its stdout and stderr
	URL   string // an api's base URL
	Admin string // the base URL of its FLASHSALE_ADMIN_ADDR listener (/metrics), when it has one
	done  chan struct{}
	// leaving: told to stop (Stop); the shop sends it nothing more, as a load balancer that
	// saw /readyz answer 503.
	leaving atomic.Bool
}

// Start runs bin with exactly env, its output in dir/<name>-<n>.log; it is killed when the
// test ends, and a failed test logs the end of its log.
func Start(t testing.TB, dir, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- %s log (last 3000 bytes):\n%s", name, Tail(b, 3000))
		}
	})
	return p
}

// StartAPI starts an api process on a free port (FLASHSALE_HTTP_ADDR added to env); WaitReady
// waits until it serves.
func StartAPI(t testing.TB, dir, name, bin string, env []string) *Proc {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(t))
	p := Start(t, dir, name, bin, append(append([]string{}, env...), "FLASHSALE_HTTP_ADDR="+addr))
	p.URL = "http://" + addr
	return p
}

// WaitReady waits until the api's /readyz answers 200 (a process that exits first fails the
// test at once).
func (p *Proc) WaitReady(t testing.TB) {
	t.Helper()
	WaitFor(t, p.Name+" ready", 90*time.Second, func() bool {
		if p.Exited() {
			t.Fatalf("%s exited before it was ready", p.Name)
		}
		r, err := http.Get(p.URL + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
}

// Tail is the last n bytes of b.
func Tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Logged reports whether the process's log holds s.
func (p *Proc) Logged(s string) bool {
	b, _ := os.ReadFile(p.Log)
	return bytes.Contains(b, []byte(s))
}

// Kill9 is kill -9: no shutdown hook runs (a consumer does not leave its group).
func (p *Proc) Kill9() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop takes the process out of the shop's rotation, then sends it sig (SIGTERM: a graceful
// stop).
func (p *Proc) Stop(sig os.Signal) {
	p.leaving.Store(true)
	_ = p.Cmd.Process.Signal(sig)
}

// ExitCode waits up to within for the process to end and returns its exit status (-1: killed
// by a signal, or still running at the deadline).
func (p *Proc) ExitCode(within time.Duration) int {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(within):
		return -1
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Metric reads one sample from a /metrics page (metrics.Scrape).
func Metric(base, series string) (float64, error) { return metrics.Scrape(base, series) }

// Parallel runs f over xs with n goroutines.
func Parallel[T any](n int, xs []T, f func(T)) {
	ch := make(chan T)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range ch {
				f(x)
			}
		}()
	}
	for _, x := range xs {
		ch <- x
	}
	close(ch)
	wg.Wait()
}

// Env is what a test's api and reconciler processes share: where Redis, Postgres and Kafka
// are, the secrets, the dev login, the reservation TTL and a short shutdown, with every rate
// limit off and payment settled outside (a test's thousands of shoppers log in from one address; the tests prove faults
// and fleets, not limits). extra is appended (a later entry of the same name wins).
type Env struct {
	RedisAddrs, RedisPrefix, PostgresDSN, KafkaBrokers, KafkaTopic string
	JWTSecret, AdminToken                                          string
	ReservationTTL                                                 time.Duration
}

// List returns the environment as KEY=value entries, then extra.
func (e Env) List(extra ...string) []string {
	return append([]string{
		"FLASHSALE_REDIS_ADDRS=" + e.RedisAddrs,
		"FLASHSALE_REDIS_PREFIX=" + e.RedisPrefix,
		"FLASHSALE_POSTGRES_DSN=" + e.PostgresDSN,
		"KAFKA_BROKERS=" + e.KafkaBrokers,
		"FLASHSALE_KAFKA_TOPIC=" + e.KafkaTopic,
		"FLASHSALE_JWT_SECRET=" + e.JWTSecret,
		"FLASHSALE_ADMIN_TOKEN=" + e.AdminToken,
		"FLASHSALE_DEV_LOGIN=true",
		"FLASHSALE_RESERVATION_TTL=" + e.ReservationTTL.String(),
		"FLASHSALE_SHUTDOWN_TIMEOUT=5s",
		"FLASHSALE_LIMIT_PURCHASE=off", "FLASHSALE_LIMIT_PAY=off", "FLASHSALE_LIMIT_CANCEL=off",
		"FLASHSALE_LIMIT_LOGIN_USER=off", "FLASHSALE_LIMIT_LOGIN_IP=off",
		// The shop settles outside (POST /pay) unless a test takes payment through a simulator
		// (extra FLASHSALE_PAYMENT_PROVIDER=sim and its address).
		"FLASHSALE_PAYMENT_PROVIDER=none",
		"PATH=" + os.Getenv("PATH"),
	}, extra...)
}
