package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/redisconn"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := Parse(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:8080" || c.KafkaTopic != "flashsale.orders" || c.ReservationTTL != 10*time.Minute ||
		c.LeaderboardSize != 100 || !c.DevLogin || len(c.KafkaBrokers) != 0 || c.RedisAddrs[0] != "127.0.0.1:6379" {
		t.Fatalf("defaults: %+v", c)
	}
	if !c.JWTSecretGenerated || !c.AdminTokenGenerated || c.JWTSecret == "" || c.AdminToken == "" {
		t.Fatal("secrets are generated when unset")
	}
	if m := c.Masked(); m.JWTSecret != "***" || m.AdminToken != "***" {
		t.Fatal("Masked leaves a secret")
	}
	if c.LimitPurchase != (Limit{Rate: 5, Period: time.Second, Burst: 10}) {
		t.Fatalf("purchase limit %v", c.LimitPurchase)
	}
}

func TestValues(t *testing.T) {
	c, err := Parse(env(map[string]string{
		"FLASHSALE_REDIS_ADDRS":     "a:1, b:2 ,c:3",
		"KAFKA_BROKERS":             "k1:9092,k2:9092",
		"FLASHSALE_DEV_LOGIN":       "false",
		"FLASHSALE_LIMIT_PAY":       "off",
		"FLASHSALE_LIMIT_LOGIN_IP":  "100/1m",
		"FLASHSALE_RESERVATION_TTL": "90s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.RedisAddrs) != 3 || c.RedisAddrs[1] != "b:2" || len(c.KafkaBrokers) != 2 || c.DevLogin ||
		c.LimitPay.Rate != 0 || c.LimitLoginIP != (Limit{Rate: 100, Period: time.Minute, Burst: 100}) || c.ReservationTTL != 90*time.Second {
		t.Fatalf("parsed: %+v", c)
	}
}

// Both binaries exit on an invalid value: Parse must refuse, naming the variable.
func TestInvalid(t *testing.T) {
	for k, v := range map[string]string{
		"FLASHSALE_REDIS_DB":          "16",
		"FLASHSALE_DEV_LOGIN":         "maybe",
		"FLASHSALE_RESERVATION_TTL":   "ten minutes",
		"FLASHSALE_LEADERBOARD_SIZE":  "0",
		"FLASHSALE_LIMIT_PURCHASE":    "5/0s:10",
		"FLASHSALE_LIMIT_RATING":      "fast",
		"FLASHSALE_EXPIRY_BATCH":      "1000",
		"FLASHSALE_SNAPSHOT_INTERVAL": "-1s",
		"FLASHSALE_IDEMPOTENCY_TTL":   "1us",
		"FLASHSALE_ORDER_RETENTION":   "forever",
		"FLASHSALE_REDIS_ADDRS":       " , ",
		"FLASHSALE_TRUSTED_PROXIES":   "10.0.0.0/8,not-an-ip",
		"FLASHSALE_JWT_SECRET":        "short-secret",
		"FLASHSALE_LOG_LEVEL":         "verbose",
		"FLASHSALE_ADMIN_TOKEN":       "change-me-admin-token-0123456789",
	} {
		if _, err := Parse(env(map[string]string{k: v})); err == nil {
			t.Errorf("%s=%q accepted", k, v)
		} else if !strings.Contains(err.Error(), "config:") {
			t.Errorf("%s: error %q", k, err)
		}
	}
	// An idempotency key that lapses while its order can still be paid: a retry would buy again.
	if _, err := Parse(env(map[string]string{"FLASHSALE_IDEMPOTENCY_TTL": "5m"})); err == nil ||
		!strings.Contains(err.Error(), "FLASHSALE_IDEMPOTENCY_TTL") {
		t.Errorf("an idempotency TTL under the 10m reservation TTL: %v", err)
	}
	if _, err := Parse(env(map[string]string{"FLASHSALE_IDEMPOTENCY_TTL": "10m"})); err != nil {
		t.Errorf("an idempotency TTL equal to the reservation TTL: %v", err)
	}
	// A final order that left Redis within the idempotency window: a replay would find its key
	// but not its order. One line, naming both variables.
	if _, err := Parse(env(map[string]string{"FLASHSALE_ORDER_RETENTION": "12h"})); err == nil ||
		!strings.Contains(err.Error(), "FLASHSALE_ORDER_RETENTION (12h0m0s) must be at least FLASHSALE_IDEMPOTENCY_TTL (24h0m0s)") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("a retention under the 24h idempotency TTL: %v", err)
	}
	if c, err := Parse(env(map[string]string{"FLASHSALE_ORDER_RETENTION": "1h", "FLASHSALE_IDEMPOTENCY_TTL": "1h"})); err != nil ||
		c.OrderRetention != time.Hour {
		t.Errorf("a retention equal to the idempotency TTL: %+v %v", c.OrderRetention, err)
	}
	if c, err := Parse(env(nil)); err != nil || c.OrderRetention != 720*time.Hour {
		t.Errorf("default retention %s %v, want 720h", c.OrderRetention, err)
	}
	// The drain counts in the shutdown timeout and must leave requests in flight some of it.
	if _, err := Parse(env(map[string]string{"FLASHSALE_SHUTDOWN_DRAIN": "10s"})); err == nil ||
		!strings.Contains(err.Error(), "FLASHSALE_SHUTDOWN_DRAIN") {
		t.Errorf("a drain as long as the 10s shutdown timeout: %v", err)
	}
	if c, err := Parse(env(map[string]string{"FLASHSALE_SHUTDOWN_DRAIN": "5s", "FLASHSALE_SHUTDOWN_TIMEOUT": "20s"})); err != nil ||
		c.ShutdownDrain != 5*time.Second || c.ShutdownTimeout != 20*time.Second {
		t.Errorf("a 5s drain in a 20s shutdown: %+v %v", c, err)
	}
	if _, err := Parse(env(map[string]string{"FLASHSALE_OUTBOX_MAX": "0"})); err == nil {
		t.Error("FLASHSALE_OUTBOX_MAX=0 accepted")
	}
}

// Credentials: a mechanism the clients lack, SASL without a user, TLS towards the embedded
// broker or half its login refuse to start; passwords never reach the logged config (nor the DSN's).
func TestCredentials(t *testing.T) {
	for _, bad := range []map[string]string{
		{"KAFKA_BROKERS": "k:9092", "KAFKA_SASL_MECHANISM": "GSSAPI", "KAFKA_USERNAME": "u", "KAFKA_PASSWORD": "p"},
		{"KAFKA_BROKERS": "k:9092", "KAFKA_SASL_MECHANISM": "PLAIN"},
		{"KAFKA_TLS": "true"},
		{"KAFKA_USERNAME": "u"},
		{"FLASHSALE_REDIS_TLS": "true", "FLASHSALE_REDIS_CA_FILE": "/nonexistent.pem"},
		{"FLASHSALE_JWT_SECRET": "change-me-jwt-secret-0123456789abcdef"},
		{"FLASHSALE_ADMIN_TOKEN": "x"},
	} {
		if _, err := Parse(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	c, err := Parse(env(map[string]string{
		"KAFKA_BROKERS": "k:9092", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_USERNAME": "u", "KAFKA_PASSWORD": "kafka-secret",
		"FLASHSALE_REDIS_PASSWORD": "redis-secret",
		"FLASHSALE_POSTGRES_DSN":   "postgres://flash:TopSecretPgPass@db:5432/flashsale",
	}))
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", "config", c)
	logged := fmt.Sprintf("%+v", c.Masked()) + buf.String()
	if !strings.Contains(buf.String(), `"reservation_ttl":"10m0s"`) || !strings.Contains(buf.String(), `"postgres_dsn":"postgres://flash:xxxxx@db:5432/flashsale"`) {
		t.Errorf("the config is not logged as structured fields with a masked DSN: %s", buf.String())
	}
	for _, secret := range []string{"kafka-secret", "redis-secret", "TopSecretPgPass", c.JWTSecret, c.AdminToken} {
		if strings.Contains(logged, secret) {
			t.Errorf("the logged config holds a secret %q: %s", secret, logged)
		}
	}
}

// FLASHSALE_JWT_KEYS is read at start: an unreadable or wrong file stops the binary with one
// line naming the variable; a good one is loaded, and its kids, iss and aud are logged.
func TestJWTKeys(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(dir, "missing.pem"), junk, dir} {
		_, err := Parse(env(map[string]string{"FLASHSALE_JWT_KEYS": file}))
		if err == nil || !strings.HasPrefix(err.Error(), "config: FLASHSALE_JWT_KEYS: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("FLASHSALE_JWT_KEYS=%s: error %q, want one line naming the variable", file, err)
		}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	good := filepath.Join(dir, "idp.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Headers: map[string]string{"kid": "idp-key-7"}, Bytes: der})
	if err := os.WriteFile(good, block, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse(env(map[string]string{"FLASHSALE_JWT_KEYS": good, "FLASHSALE_JWT_ISSUER": "https://idp.test/", "FLASHSALE_JWT_AUDIENCE": "shop"}))
	if err != nil || c.JWTKeys == nil || c.JWTIssuer != "https://idp.test/" || c.JWTAudience != "shop" {
		t.Fatalf("a good key file: %v, %+v", err, c)
	}
	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", "config", c)
	if !strings.Contains(buf.String(), `"jwt_kids":["idp-key-7"]`) || !strings.Contains(buf.String(), `"jwt_audience":"shop"`) {
		t.Errorf("the key file's kids and the audience are not logged: %s", buf.String())
	}
}

// pgx takes a DSN as a URL or as keyword=value pairs, and a password in the URL's user info
// or in a (ssl)password setting of either form: the logged config shows none of them.
func TestMaskedDSNHidesEveryPassword(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"postgres://flash:pw-userinfo@db:5432/flashsale", "postgres://flash:xxxxx@db:5432/flashsale"},
		{"postgres://flash@db/flashsale?sslmode=disable", "postgres://flash@db/flashsale?sslmode=disable"},
		{"postgresql://flash@db/flashsale?password=pw-query&sslmode=require", "postgresql://flash@db/flashsale?password=xxxxx&sslmode=require"},
		{"postgres://db/flashsale?sslpassword=pw-sslkey", "postgres://db/flashsale?sslpassword=xxxxx"},
		{"host=db user=flash password=pw-keyword dbname=flashsale", "host=db user=flash password=xxxxx dbname=flashsale"},
		{"host=db password = 'pw quoted \\' still' dbname=flashsale", "host=db password=xxxxx dbname=flashsale"},
		{"host=db PassWord=pw-case sslpassword=pw-ssl2", "host=db PassWord=xxxxx sslpassword=xxxxx"},
		{"postgres://flash:pw%zz@db/x", "***"},
	} {
		got := Config{PostgresDSN: c.dsn}.Masked().PostgresDSN
		if got != c.want || strings.Contains(got, "pw") {
			t.Errorf("Masked(%q) = %q, want %q", c.dsn, got, c.want)
		}
	}
}

// The contract counts the admin token in characters (24), the JWT secret in bytes (32).
func TestAdminTokenLengthInCharacters(t *testing.T) {
	if _, err := Parse(env(map[string]string{"FLASHSALE_ADMIN_TOKEN": strings.Repeat("ä", 12)})); err == nil {
		t.Error("an admin token of 12 characters (24 bytes) accepted")
	}
	if _, err := Parse(env(map[string]string{"FLASHSALE_ADMIN_TOKEN": strings.Repeat("ä", 24)})); err != nil {
		t.Errorf("an admin token of 24 characters refused: %v", err)
	}
}

// Replication: the Sentinels name the primary (so they exclude FLASHSALE_REDIS_ADDRS), WAIT's
// timeout is never 0 (for ever), and every bad value is one line naming its variable.
func TestReplication(t *testing.T) {
	c, err := Parse(env(map[string]string{
		"FLASHSALE_REDIS_SENTINELS":         "127.0.0.1:26379, s2:26380",
		"FLASHSALE_REDIS_SENTINEL_PASSWORD": "sentinel-pass",
		"FLASHSALE_REDIS_ACK_REPLICAS":      "1",
		"FLASHSALE_REDIS_ACK_TIMEOUT":       "100ms",
	}))
	if err != nil {
		t.Fatal(err)
	}
	o := c.RedisOptions()
	if len(o.Sentinels) != 2 || o.Sentinels[1] != "s2:26380" || o.MasterName != "mymaster" ||
		o.SentinelPassword != "sentinel-pass" || o.AckReplicas != 1 || o.AckTimeout != 100*time.Millisecond {
		t.Fatalf("options %+v", o)
	}
	if m := c.Masked(); m.RedisSentinelPassword != "***" {
		t.Fatal("Masked leaves the Sentinel password")
	}
	if d, _ := Parse(env(nil)); d.RedisAckReplicas != redisconn.AckAuto || d.RedisAckTimeout != 250*time.Millisecond ||
		d.RedisSentinelLease != 2*time.Second || len(d.RedisSentinels) != 0 {
		t.Fatalf("defaults %+v", d.RedisOptions())
	}
	if a, err := Parse(env(map[string]string{"FLASHSALE_REDIS_ACK_REPLICAS": "auto", "FLASHSALE_REDIS_SENTINEL_LEASE": "1500ms"})); err != nil ||
		a.RedisOptions().AckReplicas != redisconn.AckAuto || a.RedisOptions().SentinelLease != 1500*time.Millisecond {
		t.Fatalf("auto, lease 1500ms: %+v %v", a.RedisOptions(), err)
	}
	for _, bad := range []map[string]string{
		{"FLASHSALE_REDIS_SENTINELS": "s1:26379", "FLASHSALE_REDIS_ADDRS": "127.0.0.1:6379"},
		{"FLASHSALE_REDIS_SENTINELS": "s1"},
		{"FLASHSALE_REDIS_SENTINELS": "s1:port"},
		{"FLASHSALE_REDIS_SENTINELS": "s1:26379", "FLASHSALE_REDIS_MASTER_NAME": "my master"},
		{"FLASHSALE_REDIS_SENTINEL_PASSWORD": "sentinel-pass"},
		{"FLASHSALE_REDIS_ACK_REPLICAS": "-1"},
		{"FLASHSALE_REDIS_ACK_REPLICAS": "17"},
		{"FLASHSALE_REDIS_ACK_REPLICAS": "all"},
		{"FLASHSALE_REDIS_SENTINEL_LEASE": "100ms"},
		{"FLASHSALE_REDIS_SENTINEL_LEASE": "2m"},
		{"FLASHSALE_REDIS_ACK_TIMEOUT": "0"},
		{"FLASHSALE_REDIS_ACK_TIMEOUT": "2s"},
	} {
		_, err := Parse(env(bad))
		if err == nil {
			t.Errorf("%v accepted", bad)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "config: ") || strings.Contains(msg, "\n") || !strings.Contains(msg, "FLASHSALE_REDIS_") {
			t.Errorf("%v: error %q", bad, msg)
		}
	}
}

// Dev login (anyone becomes anyone) is on by default only where nobody else can reach
// it: a loopback listener of an api without an identity provider's keys. The variable forces it
// either way, except that it cannot put HS256 tokens back beside a key file.
func TestDevLoginDefault(t *testing.T) {
	keys := writeECKeyFile(t)
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, true},
		{map[string]string{"FLASHSALE_HTTP_ADDR": "127.0.0.1:8080"}, true},
		{map[string]string{"FLASHSALE_HTTP_ADDR": "[::1]:8080"}, true},
		{map[string]string{"FLASHSALE_HTTP_ADDR": "localhost:8080"}, true},
		{map[string]string{"FLASHSALE_HTTP_ADDR": "0.0.0.0:8080"}, false},
		{map[string]string{"FLASHSALE_HTTP_ADDR": ":8080"}, false},
		{map[string]string{"FLASHSALE_HTTP_ADDR": "10.1.2.3:8080"}, false},
		{map[string]string{"FLASHSALE_HTTP_ADDR": "api.example:8080"}, false},
		{map[string]string{"FLASHSALE_HTTP_ADDR": "0.0.0.0:8080", "FLASHSALE_DEV_LOGIN": "true"}, true},
		{map[string]string{"FLASHSALE_DEV_LOGIN": "false"}, false},
		{map[string]string{"FLASHSALE_JWT_KEYS": keys}, false},
	} {
		c, err := Parse(env(tc.env))
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if c.DevLogin != tc.want {
			t.Errorf("%v: dev login %v, want %v", tc.env, c.DevLogin, tc.want)
		}
	}
	_, err := Parse(env(map[string]string{"FLASHSALE_JWT_KEYS": keys, "FLASHSALE_DEV_LOGIN": "true"}))
	if err == nil || !strings.Contains(err.Error(), "FLASHSALE_DEV_LOGIN") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("dev login with a key file: %v, want a one-line error naming FLASHSALE_DEV_LOGIN", err)
	}
}

// The embedded broker has no TLS, so it listens on loopback only; another
// address is a one-line configuration error, not a broker open to the network.
func TestEmbeddedBrokerLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9092", ":9092", "10.0.0.5:9092", "[::]:9092", "kafka.example:9092"} {
		_, err := Parse(env(map[string]string{"FLASHSALE_EMBEDDED_KAFKA_ADDR": addr}))
		if err == nil || !strings.Contains(err.Error(), "FLASHSALE_EMBEDDED_KAFKA_ADDR") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line error naming FLASHSALE_EMBEDDED_KAFKA_ADDR", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9092", "127.0.0.1:0", "[::1]:9092", "localhost:9092"} {
		if _, err := Parse(env(map[string]string{"FLASHSALE_EMBEDDED_KAFKA_ADDR": addr})); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	// With KAFKA_BROKERS no broker is embedded: the address is not used.
	if _, err := Parse(env(map[string]string{"KAFKA_BROKERS": "kafka:9092", "FLASHSALE_EMBEDDED_KAFKA_ADDR": "0.0.0.0:9092"})); err != nil {
		t.Error(err)
	}
}

func TestStreamCaps(t *testing.T) {
	c, err := Parse(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.StreamPerClient != 32 || c.StreamMax != 20000 {
		t.Fatalf("stream caps %d, %d; want 32, 20000", c.StreamPerClient, c.StreamMax)
	}
	for _, kv := range [][2]string{{"FLASHSALE_STREAM_PER_CLIENT", "0"}, {"FLASHSALE_STREAM_MAX", "-1"}, {"FLASHSALE_STREAM_MAX", "many"}} {
		if _, err := Parse(env(map[string]string{kv[0]: kv[1]})); err == nil {
			t.Errorf("%s=%s accepted", kv[0], kv[1])
		}
	}
}

// writeECKeyFile writes one P-256 public key as PEM and returns its path.
func writeECKeyFile(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	file := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// The image (Dockerfile: it listens on 0.0.0.0) and compose never turn dev login on
// by themselves: the image's own environment parses to dev login off, and no compose file or
// .env.example sets it to true.
func TestImageAndComposeLeaveDevLoginOff(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)\b(FLASHSALE_[A-Z_]+)=(\S+)`).FindAllStringSubmatch(string(b), -1) {
		vars[m[1]] = strings.Trim(m[2], `"\`)
	}
	if vars["FLASHSALE_HTTP_ADDR"] == "" {
		t.Fatal("the Dockerfile sets no FLASHSALE_HTTP_ADDR: the test reads it wrongly")
	}
	c, err := Parse(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	if c.DevLogin {
		t.Fatalf("the image's environment %v turns dev login on", vars)
	}
	files, _ := filepath.Glob("../../docker-compose*.yml")
	for _, f := range append(files, "../../.env.example") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`(?mi)^[^#\n]*FLASHSALE_DEV_LOGIN\s*[:=]\s*["']?(true|1|\$\{FLASHSALE_DEV_LOGIN:-true)`).Find(b); m != nil {
			t.Errorf("%s turns dev login on: %s", f, m)
		}
	}
}

// Defaults holds the defaults the packages once restated, unchanged since they moved here.
func TestDefaultsStatedHere(t *testing.T) {
	d := Defaults()
	if d.ReservationTTL != 10*time.Minute || d.IdempotencyTTL != 24*time.Hour || d.SnapshotInterval != 500*time.Millisecond ||
		d.PurchaseBatch != 96 || d.PurchaseInFlight != 2 || d.PurchaseLinger != 2*time.Millisecond ||
		d.LeaderboardSize != 100 || d.RatingPriorMean != 3.5 || d.RatingPriorWeight != 10 ||
		d.OrderRetention != 720*time.Hour || d.RedisSentinelLease != 2*time.Second || d.QueueTick != 200*time.Millisecond ||
		d.StreamHeartbeat != 15*time.Second || d.StreamPerClient != 32 || d.StreamMax != 20_000 {
		t.Fatalf("defaults: %+v", d.Masked())
	}
}
