package config

import (
	"strings"
	"testing"
)

// A host:port that cannot be one is a configuration error naming the variable and the value,
// at start, never a client failing on it later (or a panic); good ones pass.
func TestAddresses(t *testing.T) {
	for k, v := range map[string]string{
		"FLASHSALE_REDIS_ADDRS":         "redis:6379:1",
		"FLASHSALE_HTTP_ADDR":           "8080",
		"FLASHSALE_EMBEDDED_KAFKA_ADDR": "127.0.0.1:99999",
		"KAFKA_BROKERS":                 "kafka:9092,kafka",
		"FLASHSALE_REDIS_START_TIMEOUT": "10ms",
	} {
		_, err := Parse(env(map[string]string{k: v}))
		if err == nil || !strings.Contains(err.Error(), k) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q: %v", k, v, err)
		}
	}
	for k, v := range map[string]string{
		"FLASHSALE_REDIS_ADDRS":         "redis-a:6379,[::1]:7000",
		"FLASHSALE_HTTP_ADDR":           ":8080",
		"FLASHSALE_EMBEDDED_KAFKA_ADDR": "127.0.0.1:0",
		"FLASHSALE_REDIS_START_TIMEOUT": "5s",
	} {
		if _, err := Parse(env(map[string]string{k: v})); err != nil {
			t.Errorf("%s=%q refused: %v", k, v, err)
		}
	}
}
