//go:build faults

package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

// runbookSection returns the shell block of docs/runbook.md's section "## <title>".
func runbookSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("docs/runbook.md has no section %q", title)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(sec)
	if m == nil {
		t.Fatalf("section %q has no ```sh block", title)
	}
	return m[1]
}

// TestRedisLostItsDataRunbook loses Redis's data mid-sale (FLUSHALL on the private server),
// checks it is noticed (/readyz, 503 "restore needed", the metric), and runs the runbook's
// "Redis lost its data" as pasted, ending with a clean `reconciler batch`; then paid orders are
// paid, an open checkout's order pays through a new one, and the sale goes on.
func TestRedisLostItsDataRunbook(t *testing.T) {
	simAddr := "127.0.0.1:" + strconv.Itoa(procs.FreePort(t))
	const simKey = "sk_test_datalost_0123456789"
	payEnv := []string{"FLASHSALE_PAYMENT_PROVIDER=sim", "FLASHSALE_PAYMENT_SIM_ADDR=" + simAddr,
		"FLASHSALE_PAYMENT_SIM_API_KEY=" + simKey, "FLASHSALE_PAYMENT_WEBHOOK_SECRET=" + stormSecret}
	s := newSale(t, saleOptions{extraEnv: payEnv})
	api := s.startAPI()
	s.startReconciler()
	ctx := context.Background()

	items := map[string]int{"lost0": 1, "lost1": 1}
	for id := range items {
		s.shop.PutItem(id, 100, 1)
	}
	users := s.login("dl", 120)
	var paid, open []string         // order ids
	sessions := map[string]string{} // open order id -> its checkout session
	for i, u := range users[:40] {
		c := s.shop.Buy(procs.Any, u, []string{"lost0", "lost1"}[i%2], "k-"+u)
		if c.Status != 201 {
			t.Fatalf("purchase: %d %s", c.Status, c.Message)
		}
		if i%4 == 3 {
			continue // a reservation without a checkout
		}
		status, out, err := s.shop.JSON(procs.Any, "POST", "/api/orders/"+c.OrderID+"/checkout", s.shop.Token(u), "", nil)
		if err != nil || status != 200 {
			t.Fatalf("checkout %s: %d %v %v", c.OrderID, status, out, err)
		}
		page, _ := out["payment"].(map[string]any)["checkout_url"].(string)
		if i%2 == 0 {
			if _, err := paysim.PaySession(ctx, page, paysim.CardVisa); err != nil {
				t.Fatal(err)
			}
			paid = append(paid, c.OrderID)
		} else {
			open = append(open, c.OrderID)
			sessions[c.OrderID], _ = out["payment"].(map[string]any)["id"].(string)
		}
	}
	s.waitFor("paid orders in Postgres", 60*time.Second, func() bool {
		var n int
		_ = s.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'paid'`).Scan(&n)
		return n == len(paid)
	})
	s.waitFor("open checkouts in Postgres", 60*time.Second, func() bool {
		var n int
		_ = s.db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE status = 'open'`).Scan(&n)
		return n == len(open)
	})
	// Both observers have seen the markers: the reconciler recorded them, the api checked them.
	s.waitFor("the markers seen by the reconciler and the api", 30*time.Second, func() bool {
		n, _ := s.rdb.HLen(ctx, s.keys().Shard(0).Marker()).Result()
		return n >= 3 // gen, the record's count, the api's count
	})

	// The loss, mid-sale: shoppers keep buying while the data goes.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			for i := 40 + w; !stop.Load(); i += 4 {
				u := users[40+(i-40)%80]
				c := s.shop.Buy(procs.Any, u, []string{"lost0", "lost1"}[i%2], fmt.Sprintf("m-%s-%d", u, i))
				if c.Status == 503 && strings.HasPrefix(c.Message, "restore needed") {
					refused.Add(1)
				}
			}
		})
	}
	s.waitFor("purchases during the sale", 30*time.Second, func() bool { return len(s.shop.Calls()) > 60 })
	if err := s.rdb.FlushAll(ctx).Err(); err != nil { // the sale's private server
		t.Fatal(err)
	}
	lostAt := time.Now()
	s.waitFor("/readyz to say redis_data_lost", 10*time.Second, func() bool {
		code, body := get(t, api.URL+"/readyz")
		return code == 503 && strings.Contains(body, `"redis_data_lost: `)
	})
	t.Logf("noticed %.1f s after the loss", time.Since(lostAt).Seconds())
	s.waitFor("purchases refused: restore needed", 10*time.Second, func() bool { return refused.Load() > 0 })
	if v := metric(t, api.URL, "flashsale_redis_data_lost"); v != 1 {
		t.Fatalf("flashsale_redis_data_lost = %v", v)
	}
	stop.Store(true)
	wg.Wait()

	// The runbook's section, as pasted.
	script := runbookSection(t, "Redis lost its data")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(append([]string{}, s.env...), "API="+api.URL,
		"PATH="+filepath.Dir(bins.Reconciler)+":"+os.Getenv("PATH"), "HOME="+os.Getenv("HOME"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the runbook section failed: %v\n%s", err, procs.Tail(out.Bytes(), 6000))
	}
	if !strings.Contains(out.String(), `"data_markers": "restored"`) {
		t.Fatalf("restore --all wrote no fresh markers:\n%s", procs.Tail(out.Bytes(), 3000))
	}
	if v := metric(t, api.URL, "flashsale_redis_data_lost"); v != 0 {
		t.Fatalf("flashsale_redis_data_lost = %v after the runbook", v)
	}

	// What was paid is paid, an open checkout still pays, and the sale goes on.
	ledger := procs.CheckRedis(t, s.rdb, s.keys(), items) // stock adds up, nobody over a limit
	for _, id := range paid {
		if o := ledger.Orders[id]; o.Status != "paid" {
			t.Fatalf("paid order %s is %q after the restore", id, o.Status)
		}
	}
	var paidNow int
	_ = s.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'paid'`).Scan(&paidNow)
	if paidNow != len(paid) {
		t.Fatalf("%d paid orders in Postgres, want %d", paidNow, len(paid))
	}
	if o := ledger.Orders[open[0]]; o.Status != "reserved" {
		t.Fatalf("open checkout's order %s is %q after the restore", open[0], o.Status)
	}
	// The restore brings the open checkout back: asking again answers the same session, which
	// the shopper pays.
	owner := users[slices.IndexFunc(users, func(u string) bool { return ledger.Orders[open[0]].User == u })]
	status, again, err := s.shop.JSON(procs.Any, "POST", "/api/orders/"+open[0]+"/checkout", s.shop.Token(owner), "", nil)
	if err != nil || status != 200 {
		t.Fatalf("checkout again after the restore: %d %v %v", status, again, err)
	}
	if id, _ := again["payment"].(map[string]any)["id"].(string); id != sessions[open[0]] {
		t.Fatalf("checkout after the restore answered session %q, want the one opened before the loss %q", id, sessions[open[0]])
	}
	page, _ := again["payment"].(map[string]any)["checkout_url"].(string)
	if _, err := paysim.PaySession(ctx, page, paysim.CardVisa); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the order paid after the restore", 60*time.Second, func() bool {
		item, _ := keyspace.ItemOfOrder(open[0])
		packed, _ := s.rdb.HGet(ctx, s.keys().Item(item).Orders(), open[0]).Result()
		o, err := procs.ParseOrder(open[0], item, packed)
		return err == nil && o.Status == "paid"
	})
	procs.CheckRedis(t, s.rdb, s.keys(), items)
	late := s.login("late", 1)[0]
	if c := s.shop.Buy(procs.Any, late, "lost0", "after-restore"); c.Status != 201 {
		t.Fatalf("purchase after the restore: %d %s", c.Status, c.Message)
	}
	t.Logf("runbook output:\n%s", procs.Tail(out.Bytes(), 2000))
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
