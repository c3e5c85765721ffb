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
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/limits"
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
	if c.LimitPurchase != (limits.Policy{Rate: 5, Period: time.Second, Burst: 10}) {
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
		c.LimitPay.Rate != 0 || c.LimitLoginIP != (limits.Policy{Rate: 100, Period: time.Minute, Burst: 100}) || c.ReservationTTL != 90*time.Second {
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

// Credentials: a mechanism the clients lack, SASL without a user, or SASL towards the embedded
// broker refuse to start; passwords never reach the logged config (nor the DSN's).
func TestCredentials(t *testing.T) {
	for _, bad := range []map[string]string{
		{"KAFKA_BROKERS": "k:9092", "KAFKA_SASL_MECHANISM": "GSSAPI", "KAFKA_USERNAME": "u", "KAFKA_PASSWORD": "p"},
		{"KAFKA_BROKERS": "k:9092", "KAFKA_SASL_MECHANISM": "PLAIN"},
		{"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_USERNAME": "u", "KAFKA_PASSWORD": "p"},
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
	if d, _ := Parse(env(nil)); d.RedisAckReplicas != 0 || d.RedisAckTimeout != 250*time.Millisecond || len(d.RedisSentinels) != 0 {
		t.Fatalf("defaults %+v", d.RedisOptions())
	}
	for _, bad := range []map[string]string{
		{"FLASHSALE_REDIS_SENTINELS": "s1:26379", "FLASHSALE_REDIS_ADDRS": "127.0.0.1:6379"},
		{"FLASHSALE_REDIS_SENTINELS": "s1"},
		{"FLASHSALE_REDIS_SENTINELS": "s1:port"},
		{"FLASHSALE_REDIS_SENTINELS": "s1:26379", "FLASHSALE_REDIS_MASTER_NAME": "my master"},
		{"FLASHSALE_REDIS_SENTINEL_PASSWORD": "sentinel-pass"},
		{"FLASHSALE_REDIS_ACK_REPLICAS": "-1"},
		{"FLASHSALE_REDIS_ACK_REPLICAS": "17"},
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
