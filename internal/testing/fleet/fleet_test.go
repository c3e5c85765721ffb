//go:build fleet

package fleet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/flashsale/flashsale/internal/keyspace"
	"github.com/flashsale/flashsale/internal/testing/testenv"
	"github.com/flashsale/flashsale/internal/testing/testenv/procs"
)

const (
	catalogue  = 2000 // items loaded by the import
	selling    = 100  // of which shoppers buy these
	shoppers   = 2000
	stock      = 10 // each selling item's first stock; restocks add more
	partitions = 4
	killAt     = 700 // purchases answered when a reconciler is killed
	ttl        = 4 * time.Second
)

// fleet is the running world of the test.
type fleet struct {
	t      *testing.T
	rdb    redis.UniversalClient // the cluster, for reading the state
	space  keyspace.Space
	db     *pgxpool.Pool
	kc     *kafka.Client
	env    []string
	apis   []*procs.Proc
	recs   []*procs.Proc
	shop   *procs.Shop
	broker string
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	dir := t.TempDir()
	f := &fleet{t: t}
	f.rdb, f.space = testenv.Cluster(t)
	t.Cleanup(func() { testenv.DeletePrefix(t, f.rdb, f.space.Prefix) })
	cc, ok := f.rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("testenv.Cluster gave a %T, not a cluster client", f.rdb)
	}
	dsn := testenv.Postgres(t)
	db, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	f.db = db
	f.broker = testenv.Kafka(t, topic, partitions).Addr()
	f.kc = &kafka.Client{Addr: kafka.TCP(f.broker), Timeout: 5 * time.Second}
	f.env = procs.Env{
		RedisAddrs: strings.Join(cc.Options().Addrs, ","), RedisPrefix: f.space.Prefix, PostgresDSN: dsn,
		KafkaBrokers: f.broker, KafkaTopic: topic, JWTSecret: jwtSecret, AdminToken: adminToken, ReservationTTL: ttl,
	}.List("FLASHSALE_KAFKA_PARTITIONS=" + strconv.Itoa(partitions))
	for i := range 2 {
		f.apis = append(f.apis, procs.StartAPI(t, dir, fmt.Sprintf("api%d", i), bins.API, f.env))
	}
	for _, p := range f.apis {
		p.WaitReady(t)
	}
	// One after the other: each applies the migrations when it starts.
	for i := range 2 {
		addr := "127.0.0.1:" + strconv.Itoa(procs.FreePort(t))
		p := procs.Start(t, dir, fmt.Sprintf("reconciler%d", i), bins.Reconciler, append(slices.Clone(f.env), "FLASHSALE_ADMIN_ADDR="+addr))
		p.Admin = "http://" + addr
		procs.WaitFor(t, p.Name+" consuming", 90*time.Second, func() bool { return p.Logged("reconciler consuming") })
		f.recs = append(f.recs, p)
	}
	f.shop = procs.NewShop(t, adminToken, 60*time.Second, func() []*procs.Proc { return f.apis })
	return f
}

// The fleet sells: 2,000 shoppers buy, pay, cancel and let reservations expire across 100 items
// through two apis while an admin restocks, and one reconciler is killed (-9) mid-sale. Then: no
// oversell, nobody over a limit, Postgres holds Redis's orders once, batch agrees, and the
// surviving reconciler took every partition and finished the topic.
func TestFleetSale(t *testing.T) {
	began := time.Now()
	f := newFleet(t)
	ctx := context.Background()

	// Both reconcilers hold a share of the 4 partitions before anything is published.
	var before groupState
	procs.WaitFor(t, "two reconcilers sharing the partitions", 90*time.Second, func() bool {
		g, err := describeGroup(ctx, f.kc)
		if err != nil || len(g.members) != 2 {
			return false
		}
		var all []int
		for _, m := range g.members {
			if len(m) == 0 {
				return false
			}
			all = append(all, m...)
		}
		before = g
		return len(all) == partitions
	})
	t.Logf("before the sale the group's members hold partitions %v", before.members)

	items := f.importCatalogue()
	users := make([]string, shoppers)
	for i := range users {
		users[i] = "u" + strconv.Itoa(i)
	}
	f.shop.Login(users)
	setup := time.Since(began)

	// The sale. The worker whose purchase is answered killAt-th kills reconciler1 once both
	// reconcilers have written events (an event of the sale, not a point in time); the other
	// workers buy on meanwhile.
	victim, survivor := f.recs[1], f.recs[0]
	var answered atomic.Int64
	var killedAt int64
	var survivorAtKill float64
	var once sync.Once
	idx := make([]int, shoppers)
	for i := range idx {
		idx[i] = i
	}
	saleStart := time.Now()
	procs.Parallel(64, idx, func(i int) {
		u, api, item := users[i], i%2, items[i%selling]
		key := ""
		if i%2 == 0 {
			key = "k-" + u
		}
		c := f.shop.Buy(api, u, item, key)
		n := answered.Add(1)
		if n == killAt {
			once.Do(func() {
				if !procs.Eventually(60*time.Second, func() bool { return applied(victim) > 0 && applied(survivor) > 0 }) {
					t.Errorf("after 60 s %s wrote %v events and %s %v: not both", victim.Name, applied(victim), survivor.Name, applied(survivor))
				}
				t.Logf("killing %s (it wrote %v events; %s wrote %v)", victim.Name, applied(victim), survivor.Name, applied(survivor))
				survivorAtKill = applied(survivor)
				victim.Kill9()
				killedAt = answered.Load()
			})
		}
		if n%50 == 0 { // an admin restocks as the sale goes: 40 restocks of 2
			f.shop.Restock(int(n/50)%2, items[int(n/50)%selling], 2)
		}
		if c.Status != 201 {
			return
		}
		other := 1 - api // the order is paid or cancelled through the other api
		switch i % 5 {
		case 0, 1:
			f.shop.Order(other, "pay", u, c.OrderID)
		case 2:
			if f.shop.Order(other, "cancel", u, c.OrderID).Status == 200 {
				f.shop.Buy(api, u, item, "") // the allowance came back
			}
		case 3:
			// Over the limit of 1 unless the first already expired; both are paid, so a second
			// order the limit should have refused would show as two paid at the end.
			again := f.shop.Buy(other, u, item, "")
			f.shop.Order(api, "pay", u, c.OrderID)
			if again.Status == 201 {
				f.shop.Order(other, "pay", u, again.OrderID)
			}
		}
		// case 4: left to expire
	})
	saleTook := time.Since(saleStart)
	if killedAt == 0 || killedAt >= answered.Load() {
		t.Fatalf("the reconciler was killed after %d of %d purchases: not mid-sale", killedAt, answered.Load())
	}

	// Every reservation left unpaid expires before Redis is compared with Postgres.
	procs.WaitFor(t, "every reservation to be paid, cancelled or expired", 90*time.Second, func() bool {
		for _, id := range items {
			if n, _ := f.rdb.HGet(ctx, f.space.Item(id).Hash(), "reserved").Int(); n != 0 {
				return false
			}
		}
		return true
	})
	orders := f.verifyRedis(items)
	f.verifyPostgres(orders)

	// The survivor took every partition and committed the whole topic.
	var after groupState
	procs.WaitFor(t, "the survivor holding every partition, committed to the end", 60*time.Second, func() bool {
		g, err := describeGroup(ctx, f.kc)
		after = g
		return err == nil && len(g.members) == 1 && len(g.members[0]) == partitions && g.caughtUp()
	})
	if survivor.Exited() {
		t.Fatalf("%s exited", survivor.Name)
	}
	if got := applied(survivor); got <= survivorAtKill {
		t.Errorf("%s wrote no event after the kill (%v before, %v after)", survivor.Name, survivorAtKill, got)
	}
	t.Logf("after the sale %s holds partitions %v, committed %v of %v", survivor.Name, after.members[0], after.committed, after.end)

	// Batch reconciliation of Redis against Postgres is clean (exit 0: no drift).
	procs.ReconcileBatch(t, bins.Reconciler, f.env)

	f.summary(orders, killedAt, setup, saleTook, time.Since(began))
}

// importCatalogue loads the catalogue through the admin import, in files of 250 rows sent to
// both apis at once (one file of 2,000 rows outlasts the api's 30 s write timeout on today's
// code under -race), and returns the ids of the items on sale: every 20th, spread over the
// cluster's slots.
func (f *fleet) importCatalogue() []string {
	f.t.Helper()
	const header = "id,name,category,price_cents,stock,per_user_limit,starts_at,ends_at\n"
	var files []string
	var b strings.Builder
	var onSale []string
	for i := range catalogue {
		if i%250 == 0 {
			if b.Len() > 0 {
				files = append(files, b.String())
			}
			b.Reset()
			b.WriteString(header)
		}
		id := fmt.Sprintf("f%04d", i)
		if i%(catalogue/selling) == 0 {
			onSale = append(onSale, id)
			fmt.Fprintf(&b, "%s,Item %d,sale,%d,%d,1,,\n", id, i, 100+i, stock)
		} else {
			fmt.Fprintf(&b, "%s,Item %d,other,%d,100,5,,\n", id, i, 100+i)
		}
	}
	files = append(files, b.String())
	idx := make([]int, len(files))
	for i := range idx {
		idx[i] = i
	}
	var mu sync.Mutex
	created := 0
	procs.Parallel(len(f.apis), idx, func(i int) {
		status, out, err := f.shop.Do(i%len(f.apis), "POST", "/api/admin/items/import", adminToken, "", "text/csv", []byte(files[i]))
		if err != nil || status != 200 || out["failed"] != float64(0) {
			f.t.Errorf("import of file %d: %d %v %v", i, status, out, err)
			return
		}
		mu.Lock()
		created += int(out["created"].(float64))
		mu.Unlock()
	})
	if created != catalogue {
		f.t.Fatalf("the import created %d items, want %d", created, catalogue)
	}
	return onSale
}

// verifyRedis checks the live state of every item on sale (procs.CheckRedis: stock adds up
// and never went below zero, the orders add up to the item's counters, nobody holds more than
// the limit of 1), that no restock went missing and no order is still reserved, and the calls
// against the orders (procs.CheckAnswers). It returns Redis's orders by id.
func (f *fleet) verifyRedis(items []string) map[string]procs.Order {
	f.t.Helper()
	limits := map[string]int{}
	for _, id := range items {
		limits[id] = 1
	}
	ledger := procs.CheckRedis(f.t, f.rdb, f.space, limits)
	for id, st := range ledger.Items {
		if st.Total < stock {
			f.t.Errorf("%s: stock_total %d, below its first stock %d", id, st.Total, stock)
		}
	}
	for id, o := range ledger.Orders {
		if o.Status == "reserved" {
			f.t.Errorf("order %s is still reserved after every reservation ended", id)
		}
	}
	procs.CheckAnswers(f.t, f.shop.Calls(), ledger.Orders)
	return ledger.Orders
}

// verifyPostgres waits until Postgres holds exactly Redis's orders (each once, same user,
// item, quantity and status) and the whole catalogue.
func (f *fleet) verifyPostgres(orders map[string]procs.Order) {
	f.t.Helper()
	procs.WaitPostgres(f.t, f.db, orders, 90*time.Second)
	var n int
	if err := f.db.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n); err != nil || n != catalogue {
		f.t.Errorf("Postgres holds %d items (%v), want %d", n, err, catalogue)
	}
}

// summary checks that the sale exercised every path (a sale that sold nothing, expired nothing
// or refused nobody proves little) and logs its figures.
func (f *fleet) summary(orders map[string]procs.Order, killedAt int64, setup, sale, total time.Duration) {
	f.t.Helper()
	status := map[string]int{}
	for _, o := range orders {
		status[o.Status]++
	}
	refused := map[string]int{}
	perAPI := [2]int{}
	restocked := 0
	calls := f.shop.Calls()
	for _, c := range calls {
		perAPI[c.API]++
		if c.Status == 409 {
			refused[c.Code]++
		}
		if c.Kind == "restock" && c.Status == 200 {
			restocked++
		}
	}
	for _, s := range []string{"paid", "cancelled", "expired"} {
		if status[s] == 0 {
			f.t.Errorf("no order ended %s: the sale did not exercise it", s)
		}
	}
	for _, code := range []string{"sold_out", "limit_exceeded"} {
		if refused[code] == 0 {
			f.t.Errorf("no purchase was refused %s: the sale did not exercise it", code)
		}
	}
	if restocked == 0 {
		f.t.Error("no restock succeeded")
	}
	if perAPI[0] == 0 || perAPI[1] == 0 {
		f.t.Errorf("calls per api %v: both must serve", perAPI)
	}
	f.t.Logf("fleet: %d calls (api0 %d, api1 %d), orders %v, refusals %v, %d restocks; reconciler killed after %d purchases",
		len(calls), perAPI[0], perAPI[1], status, refused, restocked, killedAt)
	f.t.Logf("fleet: setup %.1f s, sale %.1f s, whole test %.1f s", setup.Seconds(), sale.Seconds(), total.Seconds())
}
