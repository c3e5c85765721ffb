package main

import (
	"context"
	"fmt"
	"os"
	"slices"
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

// redisSample is what the private redis-server has done so far: CPU time (INFO cpu), calls and
// time by command (INFO commandstats, scripts' commands included) and used_memory. minus and
// plus make it a window's and add windows up (mem is then the window's growth, maybe negative).
type redisSample struct {
	cpu time.Duration
	// replicaCPU is the CPU time of the server's replicas, when sampled with it (the replica
	// rows): they apply every write the server makes.
	replicaCPU time.Duration
	mem        int64
	cmds       map[string]cmdStat
}

type cmdStat struct {
	calls int64
	usec  int64
}

func (s redisSample) minus(o redisSample) redisSample {
	d := redisSample{cpu: max(s.cpu-o.cpu, 0), replicaCPU: max(s.replicaCPU-o.replicaCPU, 0), mem: s.mem - o.mem, cmds: map[string]cmdStat{}}
	for k, v := range s.cmds {
		d.cmds[k] = cmdStat{v.calls - o.cmds[k].calls, v.usec - o.cmds[k].usec}
	}
	return d
}

func (s redisSample) plus(o redisSample) redisSample {
	d := redisSample{cpu: s.cpu + o.cpu, replicaCPU: s.replicaCPU + o.replicaCPU, mem: s.mem + o.mem, cmds: map[string]cmdStat{}}
	for _, m := range []map[string]cmdStat{s.cmds, o.cmds} {
		for k, v := range m {
			d.cmds[k] = cmdStat{d.cmds[k].calls + v.calls, d.cmds[k].usec + v.usec}
		}
	}
	return d
}

// perOp lists the top commands by time per request: "evalsha 0.05 calls 9.1 µs, ...".
func (s redisSample) perOp(n int64, top int) string {
	if n == 0 || len(s.cmds) == 0 {
		return "–"
	}
	names := make([]string, 0, len(s.cmds))
	for k, v := range s.cmds {
		if v.calls > 0 && k != "info" {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return int(s.cmds[b].usec - s.cmds[a].usec) })
	var parts []string
	for i, k := range names {
		if i == top {
			break
		}
		v := s.cmds[k]
		parts = append(parts, fmt.Sprintf("%s %.2f calls %.1f µs", k, float64(v.calls)/float64(n), float64(v.usec)/float64(n)))
	}
	return strings.Join(parts, ", ")
}

// sampleRedis reads the private redis-server's INFO cpu and commandstats (zero when there is
// none or it does not answer).
func (b *bench) sampleRedis() redisSample {
	if b.redisInfo == nil {
		return redisSample{}
	}
	return sampleRedisAt(b.redisInfo)
}

// sampleRedisAt reads one redis-server's INFO cpu, memory and commandstats (zero when it does
// not answer).
func sampleRedisAt(c *redis.Client) redisSample {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "cpu", "memory", "commandstats").Result()
	if err != nil {
		return redisSample{}
	}
	s := redisSample{cmds: map[string]cmdStat{}}
	var cpu float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case k == "used_memory":
			s.mem, _ = strconv.ParseInt(v, 10, 64)
		case strings.HasPrefix(k, "cmdstat_"):
			var st cmdStat
			for _, f := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(f, "=")
				switch name {
				case "calls":
					st.calls, _ = strconv.ParseInt(val, 10, 64)
				case "usec":
					st.usec, _ = strconv.ParseInt(val, 10, 64)
				}
			}
			s.cmds[strings.TrimPrefix(k, "cmdstat_")] = st
		}
	}
	s.cpu = time.Duration(cpu * float64(time.Second))
	return s
}
