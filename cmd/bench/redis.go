package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateRedis starts the redis-server every row but the scale rows (which start their own)
// runs against, unless -shared-redis: nobody else's traffic then counts in its INFO, so Redis's
// CPU time per purchase can be measured, and the shared server is spared the load. It sets
// FLASHSALE_REDIS_ADDRS for this process and the servers it starts; stop restores it.
func (b *bench) privateRedis(ctx context.Context) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "flashsale-bench-redis-")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	progress(b.out, "starting a private redis-server on %s", addr)
	srv, err := start(ctx, "redis-server", "redis-server", []string{"--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", ""}, nil, addr, "", b.logw)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w (install it: apt-get install redis-server, or run with -shared-redis)", err)
	}
	old, had := os.LookupEnv("FLASHSALE_REDIS_ADDRS")
	os.Setenv("FLASHSALE_REDIS_ADDRS", addr)
	b.redisInfo = redis.NewClient(&redis.Options{Addr: addr})
	return func() {
		b.redisInfo.Close()
		b.redisInfo = nil
		srv.stop()
		os.RemoveAll(dir)
		if had {
			os.Setenv("FLASHSALE_REDIS_ADDRS", old)
		} else {
			os.Unsetenv("FLASHSALE_REDIS_ADDRS")
		}
	}, nil
}

// redisCPU is the private redis-server's CPU time so far (INFO cpu: used_cpu_sys +
// used_cpu_user), 0 when there is none or it does not answer.
func (b *bench) redisCPU() time.Duration {
	if b.redisInfo == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := b.redisInfo.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
