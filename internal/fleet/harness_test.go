//go:build fleet

// Package fleet is the fleet stage of make test (issue 15): flashsale as it runs in production,
// several of each process. A local 3-master Redis Cluster, a Kafka-protocol broker with a
// 4-partition topic, two api processes and two reconciler processes (the real binaries, built
// with -race), a throw-away PostgreSQL database. The test talks to them only as clients and
// operators do: HTTP, the reconciler's CLI, Postgres, Kafka's group protocol, and reads of the
// Redis state through internal/keyspace, so it holds whatever the key layout inside becomes.
package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

const (
	topic      = "flashsale.orders"
	group      = "reconciler" // the reconciler's consumer group (cmd/reconciler)
	adminToken = "fleet-admin-token-0123456789abcdef"
	jwtSecret  = "fleet-jwt-secret-0123456789abcdef0123"
)

// bins are the api and reconciler binaries, built once with -race by TestMain.
var bins struct{ api, reconciler string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flashsale-fleet-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.api, bins.reconciler = filepath.Join(dir, "api"), filepath.Join(dir, "reconciler")
	for _, b := range []struct{ out, pkg string }{{bins.api, "./cmd/api"}, {bins.reconciler, "./cmd/reconciler"}} {
		cmd := exec.Command("go", "build", "-race", "-o", b.out, b.pkg)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "fleet: go build %s: %v\n%s", b.pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond until it holds or the deadline passes (a condition, never a fixed time).
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if !eventually(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// eventually polls cond until it holds (true) or the deadline passes (false); for goroutines
// other than the test's, which must not call t.Fatal.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// proc is one real process of ours.
type proc struct {
	name  string
	cmd   *exec.Cmd
	log   string
	url   string // the api's base URL
	admin string // the reconciler's /metrics base URL
	done  chan struct{}
}

func start(t *testing.T, dir, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("--- %s log (last 3000 bytes):\n%s", name, b)
		}
	})
	return p
}

func (p *proc) logged(s string) bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(b, []byte(s))
}

// kill9 is kill -9: no shutdown hook runs, the group is not left.
func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// metric reads one sample from a /metrics page: name is the whole series as printed, labels
// included (e.g. `flashsale_consumer_events_total{result="applied"}`); absent reads 0.
func metric(base, series string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}

// applied is how many events a reconciler wrote to Postgres (its own counter).
func (p *proc) applied() float64 {
	v, _ := metric(p.admin, `flashsale_consumer_events_total{result="applied"}`)
	return v
}

// shop drives the apis over HTTP as shoppers and an admin would, recording every call.
type shop struct {
	t    *testing.T
	hc   *http.Client
	apis []*proc

	mu     sync.Mutex
	tokens map[string]string
	calls  []*call
}

// call is one client call and what it learnt.
type call struct {
	kind, user, item, key string
	api                   int
	status                int // 0: a transport error (no answer)
	code, message         string
	orderID, orderStatus  string
}

// unknown reports whether the caller cannot know whether the call changed anything.
func (c *call) unknown() bool {
	return c.status == 0 || c.status == 500 || (c.status == 503 && strings.Contains(c.message, "outcome is unknown"))
}

// do sends one request to api number api (of sh.apis).
func (sh *shop) do(api int, method, path, token, key, ctype string, body []byte) (int, map[string]any, error) {
	req, _ := http.NewRequest(method, sh.apis[api].url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := sh.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

func (sh *shop) json(api int, method, path, token, key string, body any) (int, map[string]any, error) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return sh.do(api, method, path, token, key, "application/json", b)
}

// login mints tokens for the users, alternating the apis, 32 at a time.
func (sh *shop) login(users []string) {
	sh.t.Helper()
	idx := make([]int, len(users))
	for i := range idx {
		idx[i] = i
	}
	parallel(32, idx, func(i int) {
		status, out, err := sh.json(i%len(sh.apis), "POST", "/api/login", "", "", map[string]string{"user": users[i]})
		if err != nil || status != 200 {
			sh.t.Errorf("login %s: %d %v %v", users[i], status, out, err)
			return
		}
		sh.mu.Lock()
		sh.tokens[users[i]] = out["token"].(string)
		sh.mu.Unlock()
	})
	if sh.t.Failed() {
		sh.t.FailNow()
	}
}

func (sh *shop) token(u string) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.tokens[u]
}

func (sh *shop) record(c *call, status int, out map[string]any, err error) *call {
	c.status = status
	if err != nil {
		c.message = err.Error()
	}
	if e, ok := out["error"].(map[string]any); ok {
		c.code, _ = e["code"].(string)
		c.message, _ = e["message"].(string)
	}
	if o, ok := out["order"].(map[string]any); ok {
		c.orderID, _ = o["id"].(string)
		c.orderStatus, _ = o["status"].(string)
	}
	sh.mu.Lock()
	sh.calls = append(sh.calls, c)
	sh.mu.Unlock()
	return c
}

// buy is one purchase (quantity 1) through api; with a key, a call whose outcome is unknown is
// sent again with the same key, as the shopper page does, up to 5 times.
func (sh *shop) buy(api int, user, item, key string) *call {
	for attempt := 0; ; attempt++ {
		c := &call{kind: "purchase", user: user, item: item, key: key, api: api}
		status, out, err := sh.json(api, "POST", "/api/items/"+item+"/purchase", sh.token(user), key, map[string]int{"quantity": 1})
		sh.record(c, status, out, err)
		if key == "" || !c.unknown() || attempt == 4 {
			return c
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// order pays or cancels an order through api.
func (sh *shop) order(api int, kind, user, id string) *call {
	status, out, err := sh.json(api, "POST", "/api/orders/"+id+"/"+kind, sh.token(user), "", nil)
	return sh.record(&call{kind: kind, user: user, api: api}, status, out, err)
}

// restock adds delta units of item through api.
func (sh *shop) restock(api int, item string, delta int) *call {
	status, out, err := sh.json(api, "POST", "/api/admin/items/"+item+"/stock", adminToken, "", map[string]int{"delta": delta})
	return sh.record(&call{kind: "restock", item: item, api: api}, status, out, err)
}

// parallel runs f over xs with n goroutines.
func parallel[T any](n int, xs []T, f func(T)) {
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

// groupState is the reconciler group as the broker sees it: each member's partitions of the
// topic, and per partition the committed offset and the log end.
type groupState struct {
	members   [][]int
	committed map[int]int64
	end       map[int]int64
}

func describeGroup(ctx context.Context, c *kafka.Client) (groupState, error) {
	var g groupState
	d, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return g, err
	}
	if len(d.Groups) != 1 || d.Groups[0].Error != nil {
		return g, fmt.Errorf("describe group: %+v", d.Groups)
	}
	for _, m := range d.Groups[0].Members {
		var parts []int
		for _, tp := range m.MemberAssignments.Topics {
			if tp.Topic == topic {
				parts = append(parts, tp.Partitions...)
			}
		}
		g.members = append(g.members, parts)
	}
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return g, err
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		return g, fmt.Errorf("metadata: %+v", meta.Topics)
	}
	var ids []int
	var reqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		ids = append(ids, p.ID)
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return g, err
	}
	g.end = map[int]int64{}
	for _, p := range lo.Topics[topic] {
		if p.Error != nil {
			return g, p.Error
		}
		g.end[p.Partition] = p.LastOffset
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ids}})
	if err != nil {
		return g, err
	}
	g.committed = map[int]int64{}
	for _, p := range of.Topics[topic] {
		if p.Error != nil {
			return g, p.Error
		}
		g.committed[p.Partition] = p.CommittedOffset
	}
	return g, nil
}

// caughtUp reports whether every partition is committed to its end.
func (g groupState) caughtUp() bool {
	for p, end := range g.end {
		if g.committed[p] < end {
			return false
		}
	}
	return len(g.end) > 0
}

// drain reads and discards a body (keeps connections reusable).
func drain(r io.ReadCloser) { _, _ = io.Copy(io.Discard, r); r.Close() }
