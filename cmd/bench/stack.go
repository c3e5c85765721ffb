package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for the migrations
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/migrations"
)

// child is one server process the bench started.
type child struct {
	name  string
	cmd   *exec.Cmd
	addr  string
	waitc chan error // receives the exit once
}

// start runs bin with env added to this process's environment (KAFKA_BROKERS removed so the
// api uses its embedded broker) and waits until addr accepts connections, or ready answers 200.
func start(ctx context.Context, name, bin string, args []string, env []string, addr, ready string, logw io.Writer) (*child, error) {
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KAFKA_BROKERS=") && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, addr: addr, waitc: make(chan error, 1)}
	go func() { c.waitc <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-c.waitc:
			return nil, fmt.Errorf("bench: %s exited during start-up: %v", name, err)
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if up(addr, ready) {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("bench: %s did not come up on %s", name, addr)
		}
	}
}

func up(addr, ready string) bool {
	if ready == "" {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + ready)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop ends the child with SIGTERM (a graceful shutdown), then SIGKILL after 10 s.
func (c *child) stop() {
	if c == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.waitc:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.waitc
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// moduleRoot finds the directory of go.mod (the bench runs from the root or from cmd/bench).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("bench: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("bench: run inside the flashsale module")
	}
	return filepath.Dir(mod), nil
}

// build compiles ./cmd/<name> into dir; missing commands return "" and no error.
func build(root, dir, name string) (string, error) {
	src := filepath.Join(root, "cmd", name)
	if m, _ := filepath.Glob(filepath.Join(src, "*.go")); len(m) == 0 {
		return "", nil
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// token mints a shopper token as the api would (HS256, sub = user).
func token(secret, user string) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
		IssuedAt:  jwt.NewNumericDate(time.Now()),
	})
	s, err := tok.SignedString([]byte(secret))
	if err != nil {
		panic(err)
	}
	return s
}

// deletePrefix removes every key under prefix (the bench's own namespace on the shared Redis).
func deletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}

// scratchPostgres creates a throw-away database with every migration applied; drop removes it.
func scratchPostgres(ctx context.Context, admin string) (dsn string, drop func(), err error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("bench: PostgreSQL at %s: %w (start it with `make services`)", admin, err)
	}
	defer conn.Close(ctx)
	name := "bench_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("bench: create database: %w", err)
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	}
	u, err := url.Parse(admin)
	if err != nil {
		drop()
		return "", nil, err
	}
	u.Path = "/" + name
	dsn = u.String()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		drop()
		return "", nil, err
	}
	defer db.Close()
	if _, err := migrations.Up(ctx, db); err != nil {
		drop()
		return "", nil, err
	}
	return dsn, drop, nil
}
