package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestStartFailuresAreOneLine starts the real api and reconciler binaries against each
// dependency they cannot use: each exits non-zero with one line on stderr naming the cause,
// never a panic. Where no retry is expected the start timeout is long, so a binary that
// retried anyway fails on the test's deadline.
func TestStartFailuresAreOneLine(t *testing.T) {
	bins := buildBinaries(t)
	taken := listen(t)        // a port something else holds (a developer's own Kafka, say)
	closed := closedAddr(t)   // a port nobody listens on
	pg := testenv.Postgres(t) // a working Postgres, for the cases that fail elsewhere
	wrongRole := withUser(t, pg, "no_such_role_"+testenv.Token(4))

	cases := []struct {
		name, bin string
		args      []string
		env       []string
		code      int      // wanted exit code
		want      []string // substrings of the error line
	}{
		{"api: redis down", "api", nil,
			[]string{"FLASHSALE_REDIS_ADDRS=" + closed, "FLASHSALE_REDIS_START_TIMEOUT=1s"},
			1, []string{"redis not reachable", "FLASHSALE_REDIS_START_TIMEOUT", closed, "connection refused"}},
		{"api: malformed redis address", "api", nil,
			[]string{"FLASHSALE_REDIS_ADDRS=redis:6379:1"},
			2, []string{"FLASHSALE_REDIS_ADDRS", "redis:6379:1"}},
		{"api: redis refuses the password", "api", nil,
			[]string{"FLASHSALE_REDIS_USERNAME=no-such-user-" + testenv.Token(4), "FLASHSALE_REDIS_PASSWORD=wrong-password", "FLASHSALE_REDIS_START_TIMEOUT=10m"},
			1, []string{"WRONGPASS"}},
		{"api: embedded kafka port taken", "api", nil,
			[]string{"FLASHSALE_EMBEDDED_KAFKA_ADDR=" + taken},
			1, []string{"FLASHSALE_EMBEDDED_KAFKA_ADDR=" + taken, "address already in use"}},
		{"api: http address taken", "api", nil,
			[]string{"FLASHSALE_HTTP_ADDR=" + taken},
			1, []string{"FLASHSALE_HTTP_ADDR=" + taken, "address already in use"}},
		{"reconciler: postgres down", "reconciler", nil,
			[]string{"FLASHSALE_POSTGRES_DSN=postgres://postgres@" + closed + "/flashsale?sslmode=disable", "FLASHSALE_POSTGRES_START_TIMEOUT=1s"},
			1, []string{"postgres not reachable", "FLASHSALE_POSTGRES_START_TIMEOUT"}},
		{"reconciler: postgres refuses the role", "reconciler", nil,
			[]string{"FLASHSALE_POSTGRES_DSN=" + wrongRole, "FLASHSALE_POSTGRES_START_TIMEOUT=10m"},
			2, []string{"postgres refused the login", "FLASHSALE_POSTGRES_DSN", "SQLSTATE 28"}},
		{"reconciler: no such database", "reconciler", nil,
			[]string{"FLASHSALE_POSTGRES_DSN=" + withDatabase(t, pg, "no_such_db_"+testenv.Token(4)), "FLASHSALE_POSTGRES_START_TIMEOUT=10m"},
			2, []string{"no such database", "FLASHSALE_POSTGRES_DSN", "3D000"}},
		{"reconciler: malformed postgres dsn", "reconciler", nil,
			[]string{"FLASHSALE_POSTGRES_DSN=postgres://u:secret@host:99999/db", "FLASHSALE_POSTGRES_START_TIMEOUT=10m"},
			2, []string{"FLASHSALE_POSTGRES_DSN", "invalid port"}},
		{"api: malformed postgres dsn", "api", nil,
			[]string{"FLASHSALE_POSTGRES_DSN=host=x port=abc"},
			2, []string{"FLASHSALE_POSTGRES_DSN", "invalid port"}},
		{"reconciler restore without arguments", "reconciler", []string{"restore"},
			[]string{"FLASHSALE_POSTGRES_DSN=" + pg},
			2, []string{"restore: give exactly one of --item"}},
		{"reconciler batch with an unknown flag", "reconciler", []string{"batch", "--bogus"},
			[]string{"FLASHSALE_POSTGRES_DSN=" + pg},
			2, []string{"flag provided but not defined: -bogus"}},
		{"api: an argument", "api", []string{"serve"}, nil,
			2, []string{"unexpected arguments", "api --help"}},
		{"paysim: an unknown flag", "paysim", []string{"--bogus"}, nil,
			2, []string{"flag provided but not defined: -bogus"}},
		{"reconciler: admin address taken", "reconciler", nil,
			[]string{"FLASHSALE_POSTGRES_DSN=" + pg, "FLASHSALE_ADMIN_ADDR=" + taken},
			1, []string{"admin listener " + taken, "address already in use"}},
		{"reconciler batch: redis down", "reconciler", []string{"batch"},
			[]string{"FLASHSALE_POSTGRES_DSN=" + pg, "FLASHSALE_REDIS_ADDRS=" + closed, "FLASHSALE_REDIS_START_TIMEOUT=1s"},
			1, []string{"redis not reachable", "FLASHSALE_REDIS_START_TIMEOUT", closed}},
		{"reconciler: malformed redis address", "reconciler", nil,
			[]string{"FLASHSALE_REDIS_ADDRS=redis:6379:1"},
			2, []string{"FLASHSALE_REDIS_ADDRS", "redis:6379:1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bins, c.bin), c.args...)
			cmd.Env = append(baseEnv(t), c.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			out := stderr.String()
			if ctx.Err() != nil {
				t.Fatalf("%s did not exit within 2 minutes (retrying a permanent error?); stderr:\n%s", c.bin, out)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != c.code {
				t.Fatalf("exit: %v, want code %d; stderr:\n%s", err, c.code, out)
			}
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("stderr holds a panic or a stack trace:\n%s", out)
			}
			if strings.Contains(out, ":secret@") {
				t.Fatalf("stderr shows a password:\n%s", out)
			}
			if c.bin == "paysim" { // the flag package's usage follows its error
				if !strings.Contains(out, c.want[0]) {
					t.Fatalf("stderr does not say %q:\n%s", c.want[0], out)
				}
				return
			}
			// The error line is the last; every other line is a JSON log record or the
			// admin token notice.
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, c.bin+": ") {
				t.Fatalf("last stderr line %q does not start with %q; stderr:\n%s", last, c.bin+": ", out)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error line %q does not name %q", last, w)
				}
			}
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasPrefix(l, "{") && !strings.HasPrefix(l, "admin token") {
					t.Errorf("stderr line %q is neither a log record nor the error line", l)
				}
			}
		})
	}
}

// buildBinaries builds every binary (cmd/api, reconciler, paysim, bench) into a temporary
// directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../api", "../reconciler", "../paysim", "../bench")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// baseEnv runs the binaries against the shared Redis with a private prefix, an embedded broker
// and HTTP listener on free ports, and a cache directory of the test's own.
func baseEnv(t *testing.T) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "XDG_CACHE_HOME=" + t.TempDir(),
		"FLASHSALE_REDIS_ADDRS=" + testenv.RedisAddr(),
		"FLASHSALE_REDIS_PREFIX=t" + testenv.Token(4) + ":",
		"FLASHSALE_HTTP_ADDR=127.0.0.1:0",
		"FLASHSALE_EMBEDDED_KAFKA_ADDR=127.0.0.1:0",
	}
}

// listen holds a port for the test's duration and returns its address.
func listen(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// closedAddr is an address nobody listens on: a port just released.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func withDatabase(t *testing.T, dsn, db string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// TestHelpAndWarnings: every binary answers --help and -h with its usage on stdout and exit 0,
// starting nothing; a misspelled FLASHSALE_* variable is a warning naming the nearest one.
func TestHelpAndWarnings(t *testing.T) {
	bins := buildBinaries(t)
	for _, bin := range []string{"api", "reconciler", "paysim", "bench"} {
		for _, arg := range [][]string{{"--help"}, {"-h"}, {"batch", "--help"}} {
			if arg[0] == "batch" && bin != "reconciler" {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmd := exec.CommandContext(ctx, filepath.Join(bins, bin), arg...)
			cmd.Env = append(baseEnv(t), "FLASHSALE_REDIS_ADDRS=127.0.0.1:1") // nothing to reach
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			cancel()
			if err != nil || !strings.Contains(strings.ToLower(stdout.String()), "usage") || stderr.Len() != 0 {
				t.Errorf("%s %v: %v; stdout:\n%s\nstderr:\n%s", bin, arg, err, stdout.String(), stderr.String())
			}
		}
	}
	for _, bin := range []string{"api", "reconciler"} {
		cmd := exec.Command(filepath.Join(bins, bin))
		cmd.Env = append(baseEnv(t), "FLASHSALE_REDIS_ADDR=127.0.0.1:7000", "FLASHSALE_REDIS_DB=99")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit 2 (FLASHSALE_REDIS_DB=99)", bin, err)
		}
		if !strings.Contains(stderr.String(), "FLASHSALE_REDIS_ADDR is not a flashsale variable and is ignored; did you mean FLASHSALE_REDIS_ADDRS?") {
			t.Errorf("%s: no warning about the misspelling:\n%s", bin, stderr.String())
		}
	}
}

func withUser(t *testing.T, dsn, user string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}
