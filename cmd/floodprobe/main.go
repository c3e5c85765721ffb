// Command floodprobe measures how fast /healthz answers during a connection flood: it holds
// half-open connections from a few loopback addresses and times GET /healthz on fresh ones (on
// -addr, and -ops when given), then prints p50/p99/max. Run the flood (-probe -10s) and the
// probe (-conns 0) as two processes: in one, the probe would time its own goroutines' wait.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("addr", "127.0.0.1:8080", "api listener")
	ops := flag.String("ops", "", "ops listener (optional)")
	total := flag.Int("conns", 22500, "half-open connections to open")
	over := flag.Duration("over", 3*time.Second, "time to open them in")
	sources := flag.String("from", "127.0.0.2,127.0.0.3,127.0.0.4", "source addresses")
	probes := flag.Duration("probe", 6*time.Second, "time to probe /healthz for; negative: no probe, flood for that long")
	redial := flag.Bool("redial", false, "dial again at once whenever the api closes a connection")
	flag.Parse()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var opened, failed, redials atomic.Int64
	srcs := strings.Split(*sources, ",")
	workers := 300
	if *total == 0 {
		workers = 0
	}
	per := *total / max(workers, 1)
	gap := *over / time.Duration(max(per, 1))
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcs[w%len(srcs)])}, Timeout: 5 * time.Second}
			t := time.NewTicker(gap)
			defer t.Stop()
			for range per {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				c, err := d.DialContext(ctx, "tcp", *target)
				if err != nil {
					failed.Add(1)
					continue
				}
				opened.Add(1)
				_, _ = io.WriteString(c, "GET / HTTP/1.1\r\n")
				wg.Add(1)
				go func() { // held until the api closes it
					defer wg.Done()
					done := context.AfterFunc(ctx, func() { c.Close() })
					for {
						_, _ = io.Copy(io.Discard, c)
						done()
						c.Close()
						if !*redial || ctx.Err() != nil {
							return
						}
						var err error
						if c, err = d.DialContext(ctx, "tcp", *target); err != nil {
							return
						}
						redials.Add(1)
						_, _ = io.WriteString(c, "GET / HTTP/1.1\r\n")
						done = context.AfterFunc(ctx, func() { c.Close() })
					}
				}()
			}
			<-ctx.Done()
		}()
	}
	probe := func(addr string, into *[]time.Duration, errs *int) {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		began := time.Now()
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			*errs++
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			*errs++
			return
		}
		*into = append(*into, time.Since(began))
	}
	var mainT, opsT []time.Duration
	var mainE, opsE int
	end := time.Now().Add(*probes)
	for *probes > 0 && time.Now().Before(end) {
		probe(*target, &mainT, &mainE)
		if *ops != "" {
			probe(*ops, &opsT, &opsE)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if *probes <= 0 {
		time.Sleep(-*probes)
	}
	stop()
	wg.Wait()
	report := func(name string, t []time.Duration, e int) {
		if len(t) == 0 {
			fmt.Printf("%s: no answers, %d errors\n", name, e)
			return
		}
		slices.Sort(t)
		fmt.Printf("%s /healthz: n=%d p50 %v p99 %v max %v errors %d\n", name, len(t),
			t[len(t)/2].Round(100*time.Microsecond), t[len(t)*99/100].Round(100*time.Microsecond), t[len(t)-1].Round(100*time.Microsecond), e)
	}
	fmt.Printf("flood: %d connections opened, %d redialled, %d dials failed\n", opened.Load(), redials.Load(), failed.Load())
	if *probes <= 0 {
		os.Exit(0)
	}
	report("main", mainT, mainE)
	if *ops != "" {
		report("ops", opsT, opsE)
	}
	os.Exit(0)
}
