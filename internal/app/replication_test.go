package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// With FLASHSALE_REDIS_ACK_REPLICAS=1, the api's answers say what a stalled or missing replica
// means: a purchase the stalled replica did not confirm is 503 "the outcome is unknown" (its
// retry with the same key, once the replica is back, returns the order), and with no live
// replica a purchase is 503 "nothing was changed" and /readyz fails.
func TestReplicasAtTheHTTPEdge(t *testing.T) {
	rs := testenv.ReplicatedRedis(t, 1)
	r := runAPI(t, "t"+testenv.Token(4)+":", testenv.Kafka(t, "flashsale.orders", 1).Addr(), map[string]string{
		"FLASHSALE_REDIS_ADDRS": rs.Primary.Addr, "FLASHSALE_REDIS_ACK_REPLICAS": "1", "FLASHSALE_LIMIT_PURCHASE": "off",
	})
	ready := func() int {
		resp, err := http.Get(r.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testenv.WaitFor(t, "/readyz 200", 30*time.Second, func() bool { return ready() == http.StatusOK })
	r.putItem("hot", 100)
	var login struct{ Token string }
	if st := r.call("POST", "/api/login", "", map[string]any{"user": "u1"}, &login); st != http.StatusOK {
		t.Fatalf("login: %d", st)
	}
	type answer struct {
		status  int
		message string
		order   string
	}
	buy := func(key string) answer {
		req, _ := http.NewRequest("POST", r.base+"/api/items/hot/purchase", bytes.NewReader([]byte(`{"quantity":1}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+login.Token)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body struct {
			ID    string `json:"id"`
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(raw, &body)
		return answer{resp.StatusCode, body.Error.Message, body.ID}
	}
	if a := buy("k0"); a.status != http.StatusCreated {
		t.Fatalf("purchase with a live replica: %+v", a)
	}
	replica := rs.Replicas[0]
	unknown := ""
	for i := 1; unknown == "" && i < 10; i++ {
		testenv.WaitFor(t, "/readyz 200", 30*time.Second, func() bool { return ready() == http.StatusOK })
		replica.Pause()
		k := "k" + strconv.Itoa(i)
		a := buy(k)
		replica.Resume()
		switch {
		case a.status == http.StatusServiceUnavailable && strings.Contains(a.message, "the outcome is unknown"):
			unknown = k
		case a.status == http.StatusServiceUnavailable && strings.Contains(a.message, "nothing was changed"):
			t.Logf("attempt %d: refused before it ran", i)
		default:
			t.Fatalf("purchase with a stalled replica: %+v", a)
		}
	}
	if unknown == "" {
		t.Fatal("no purchase met the stall before the watch did")
	}
	testenv.WaitFor(t, "/readyz 200 again", 30*time.Second, func() bool { return ready() == http.StatusOK })
	first := buy(unknown)
	if again := buy(unknown); first.status != http.StatusOK || again.order != first.order {
		t.Fatalf("retries of the unknown purchase: %+v, %+v", first, again)
	}

	replica.Kill()
	testenv.WaitFor(t, "/readyz 503 without a replica", 30*time.Second, func() bool { return ready() == http.StatusServiceUnavailable })
	if a := buy("k-none"); a.status != http.StatusServiceUnavailable || !strings.Contains(a.message, "nothing was changed") {
		t.Fatalf("purchase without a live replica: %+v", a)
	}
}
