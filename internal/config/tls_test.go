package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/redisconn"
	"github.com/flashsale/flashsale/internal/testing/testenv"
)

// TestTLSToRealServers: FLASHSALE_REDIS_TLS / _CA_FILE and KAFKA_TLS / KAFKA_CA_FILE reach a
// redis-server speaking TLS and a Kafka-protocol broker (kfake) speaking TLS: with the CA that
// signed their certificates the client pings, writes and reads in a group; with another CA, or
// without TLS, it is refused.
func TestTLSToRealServers(t *testing.T) {
	files, stranger := testenv.TLS(t), testenv.TLS(t)
	redisAddr := testenv.TLSRedis(t, files)
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(files.Server), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	brokers := broker.ListenAddrs()
	parse := func(ca string) config.Config {
		t.Helper()
		c, err := config.Parse(func(k string) string {
			return map[string]string{
				"FLASHSALE_REDIS_ADDRS": redisAddr, "FLASHSALE_REDIS_TLS": "true", "FLASHSALE_REDIS_CA_FILE": ca,
				"KAFKA_BROKERS": strings.Join(brokers, ","), "KAFKA_TLS": "true", "KAFKA_CA_FILE": ca,
			}[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	good := parse(files.CA)
	rdb, err := redisconn.OpenSecure(ctx, good.RedisAddrs, good.RedisDB, good.Redis)
	if err != nil {
		t.Fatalf("redis over TLS with the right CA: %v", err)
	}
	if err := rdb.Set(ctx, "tls-probe", "1", time.Minute).Err(); err != nil {
		t.Fatalf("redis over TLS: %v", err)
	}
	rdb.Close()
	tr, err := good.Kafka.Transport()
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "t", Transport: tr, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("over tls")}); err != nil {
		t.Fatalf("kafka write over TLS: %v", err)
	}
	d, err := good.Kafka.Dialer()
	if err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "t", GroupID: "g", Dialer: d,
		StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if m, err := r.FetchMessage(ctx); err != nil || string(m.Value) != "over tls" {
		t.Fatalf("kafka group read over TLS: %q %v", m.Value, err)
	}

	bad := parse(stranger.CA)
	if rdb, err := redisconn.OpenSecure(ctx, bad.RedisAddrs, bad.RedisDB, bad.Redis); err == nil {
		rdb.Close()
		t.Fatal("redis: a certificate from another CA was trusted")
	}
	if rdb, err := redisconn.OpenSecure(ctx, good.RedisAddrs, good.RedisDB, redisconn.Security{}); err == nil {
		rdb.Close()
		t.Fatal("redis: plaintext to the TLS port worked")
	}
	btr, err := bad.Kafka.Transport()
	if err != nil {
		t.Fatal(err)
	}
	bw := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "t", Transport: btr, MaxAttempts: 1}
	defer bw.Close()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := bw.WriteMessages(wctx, kafka.Message{Value: []byte("x")}); err == nil {
		t.Fatal("kafka: a certificate from another CA was trusted")
	}
}
