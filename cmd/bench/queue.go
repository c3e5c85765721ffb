package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

const queueItem = "line" // the item 20,000 shoppers wait for

// queueRows measures the waiting room: polls of shoppers waiting in a long line (answered from
// memory with the ticket's token) beside the bare Gin hello, with the Redis calls per poll
// counted from the api's own metrics; and joins beside purchases, in turns.
func (b *bench) queueRows(ctx context.Context) error {
	progress(b.out, "waiting room: %d shoppers join", b.opt.users)
	// A line that barely moves: one admission a second, one live pass.
	if err := b.admin2xx(ctx, "PUT", "/api/admin/items/"+queueItem, map[string]any{
		"name": "Line", "category": "bench", "price_cents": 100, "stock": int64(1e9), "per_user_limit": 1,
		"queue": map[string]any{"admit_per_second": 1, "max_active": 1, "pass_ttl_seconds": 600},
	}); err != nil {
		return err
	}
	jwts, tickets, err := b.joinAll(ctx, b.opt.users)
	if err != nil {
		return err
	}
	// Each shopper polls with the bearer token it joined with and its ticket's token, as the
	// shopper page does.
	polls := func(addr string) [][]byte {
		reqs := make([][]byte, len(tickets))
		for i, qt := range tickets {
			reqs[i] = request("GET", addr, "/api/items/"+queueItem+"/queue",
				map[string]string{"Authorization": "Bearer " + jwts[i], "Queue-Ticket": qt}, "")
		}
		return reqs
	}
	var same [][]byte
	if b.helloSrv != nil {
		same = polls(b.helloSrv.addr) // the very same request bytes (only the Host port differs)
	}
	before, err := b.apiMetrics(ctx)
	if err != nil {
		return err
	}
	res, bases, err := b.measure(ctx, "queue-poll", b.load(b.api.addr, polls(b.api.addr)), b.helloLoads(same)...)
	if err != nil {
		return err
	}
	after, err := b.apiMetrics(ctx)
	if err != nil {
		return err
	}
	d := func(name string) float64 { return after[name] - before[name] }
	answered := d("flashsale_queue_polls_memory_total") + d("flashsale_queue_polls_redis_total")
	calls := d("flashsale_queue_polls_redis_total") + d(`flashsale_redis_script_calls_total{result="ok",script="queue_admit"}`)
	note := "no polls counted"
	if answered > 0 {
		note = fmt.Sprintf("%.4f Redis calls per poll (%.0f polls from Redis, %.0f admission steps, %.0f polls in all; target < 0.01 %s)",
			calls/answered, d("flashsale_queue_polls_redis_total"),
			d(`flashsale_redis_script_calls_total{result="ok",script="queue_admit"}`), answered, mark(calls/answered < 0.01))
	}
	b.rows = append(b.rows, row{name: "waiting-room poll answers/s (20,000 waiting)", res: &res, base: baseAt(bases, 0),
		baseName: "bare Gin hello", target: 0.8, want: 200, note: note},
		// Not a target: the hello handler fed the polls' exact bytes (a bearer JWT and
		// a ticket token), so net/http's parsing of the larger request is on both sides.
		row{name: "waiting-room poll answers/s (hello fed the same GET bytes)", res: &res, base: baseAt(bases, 1),
			baseName: "bare Gin hello, same request bytes", want: 200})

	progress(b.out, "waiting room: joins beside purchases")
	joins := make([][]byte, b.opt.users)
	for i := range joins {
		joins[i] = request("POST", b.api.addr, "/api/items/"+queueItem+"/queue",
			map[string]string{"Authorization": "Bearer " + token(b.secret, "j"+itoa(i))}, "")
	}
	jres, jbases, err := b.measure(ctx, "queue-join", b.load(b.api.addr, joins),
		b.load(b.api.addr, b.purchaseReqs(b.api.addr, benchItem, "u", b.opt.users)))
	if err != nil {
		return err
	}
	b.rows = append(b.rows, row{name: "waiting-room joins/s", res: &jres, base: baseAt(jbases, 0),
		baseName: "purchase attempts (same run, in turns)", target: 0.8, want: 200,
		note: "the first join of each shopper enters the line, later ones return the same ticket; both run queue/join.lua, batched per item"})
	return nil
}

// joinAll joins n shoppers (w0..) to the line and returns their bearer tokens and their
// tickets' tokens.
func (b *bench) joinAll(ctx context.Context, n int) (jwts, tickets []string, err error) {
	jwts, tickets = make([]string, n), make([]string, n)
	for i := range jwts {
		jwts[i] = token(b.secret, "w"+itoa(i))
	}
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+b.api.addr+"/api/items/"+queueItem+"/queue", nil)
				req.Header.Set("Authorization", "Bearer "+jwts[i])
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				var body struct {
					Ticket struct {
						Token string `json:"token"`
					} `json:"ticket"`
				}
				err = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					errs <- fmt.Errorf("bench: join %d: %d %v", i, resp.StatusCode, err)
					return
				}
				tickets[i] = body.Ticket.Token
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, nil, err
	}
	return jwts, tickets, nil
}

// apiMetrics reads the api's /metrics as name{labels} -> value.
func (b *bench) apiMetrics(ctx context.Context) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+b.api.addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}
