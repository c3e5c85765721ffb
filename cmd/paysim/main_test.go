package main

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/flashsale/flashsale/internal/paysim"
)

// TestParse: defaults, environment, flags over environment, and every bad value refused.
func TestParse(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	addr, cfg, err := parse(getenv, nil, io.Discard)
	if err != nil || addr != "127.0.0.1:8090" || cfg.AsyncDelay != 5*time.Second || cfg.WebhookURL != "" ||
		len(cfg.WebhookSecrets) != 0 || cfg.Chaos.Duplicates != 1 {
		t.Fatalf("defaults: %q %+v %v", addr, cfg, err)
	}
	env = map[string]string{
		"FLASHSALE_PAYMENT_SIM_ADDR": "127.0.0.1:9999", "FLASHSALE_PAYMENT_SIM_WEBHOOK_URL": "http://127.0.0.1:8080/api/payments/webhook",
		"FLASHSALE_PAYMENT_WEBHOOK_SECRET": "whsec_a, whsec_b", "FLASHSALE_PAYMENT_SIM_ASYNC_DELAY": "2s",
		"FLASHSALE_PAYMENT_SIM_CHAOS_DUPLICATES": "5", "FLASHSALE_PAYMENT_SIM_CHAOS_REORDER": "1s",
		"FLASHSALE_PAYMENT_SIM_CHAOS_DELAY": "3s", "FLASHSALE_PAYMENT_SIM_CHAOS_FAIL_RATE": "0.1",
		"FLASHSALE_PAYMENT_SIM_API_KEY": "sk_test_0123456789abcdef", "FLASHSALE_PAYMENT_SIM_MAX_OBJECTS": "500",
	}
	addr, cfg, err = parse(getenv, []string{"-addr", "127.0.0.1:7777"}, io.Discard)
	if err != nil || addr != "127.0.0.1:7777" || cfg.WebhookURL != env["FLASHSALE_PAYMENT_SIM_WEBHOOK_URL"] ||
		len(cfg.WebhookSecrets) != 2 || cfg.WebhookSecrets[0] != "whsec_a" || cfg.AsyncDelay != 2*time.Second ||
		cfg.Chaos.Duplicates != 5 || cfg.Chaos.ReorderWindow != time.Second || cfg.Chaos.Delay != 3*time.Second || cfg.Chaos.FailAfterWriteRate != 0.1 ||
		cfg.APIKey != "sk_test_0123456789abcdef" || cfg.MaxObjects != 500 || cfg.Public {
		t.Fatalf("from the environment: %q %+v %v", addr, cfg, err)
	}
	for _, bad := range [][]string{
		{"-async-delay", "0s"}, {"-async-delay", "soon"}, {"-chaos-duplicates", "0"}, {"-chaos-fail-rate", "2"},
		{"-chaos-reorder", "-1s"}, {"-nope"}, {"extra"}, {"-addr", "0.0.0.0:8090"}, {"-api-key", "sk_live_0123456789abcdef"},
		{"-max-objects", "10"}, {"-public", "maybe"},
	} {
		if _, _, err := parse(func(string) string { return "" }, bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestRun: the command serves until its context ends, and refuses an address in use.
func TestRun(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, addr, paysim.Config{WebhookSecrets: []string{"whsec_x"}}) }()
	deadline := time.Now().Add(30 * time.Second)
	for !paysim.Answering(context.Background(), addr) {
		if time.Now().After(deadline) {
			t.Fatal("the simulator never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := run(context.Background(), addr, paysim.Config{WebhookSecrets: []string{"whsec_x"}}); err == nil {
		t.Fatal("a second simulator started on a taken address")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
