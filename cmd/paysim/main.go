// Command paysim runs the payment-provider simulator (internal/paysim) on its own: the Stripe
// subset flashsale uses, a hosted checkout page, and signed webhooks to one URL. The api starts
// the same simulator in-process when none answers on FLASHSALE_PAYMENT_SIM_ADDR.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/internal/config"
	"github.com/flashsale/flashsale/internal/paysim"
	"github.com/flashsale/flashsale/internal/shutdown"
)

func main() {
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	for _, w := range config.UnknownVariables(os.Environ()) {
		slog.Warn(w)
	}
	out := io.Writer(os.Stderr)
	if wantsHelp(os.Args[1:]) {
		out = os.Stdout // asked for: the usage is the answer
	}
	addr, cfg, err := parse(os.Getenv, os.Args[1:], out)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "paysim:", err)
		os.Exit(2)
	}
	ctx, stop := shutdown.OnSignal(context.Background())
	defer stop()
	if err := run(ctx, addr, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "paysim:", err)
		os.Exit(1)
	}
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

func run(ctx context.Context, addr string, cfg paysim.Config) error {
	sim := paysim.New(cfg)
	if err := sim.Start(addr); err != nil {
		sim.Close()
		return err
	}
	if len(cfg.WebhookSecrets) == 0 {
		// The receiver must know it to verify the signatures.
		fmt.Fprintf(os.Stderr, "webhook signing secret (FLASHSALE_PAYMENT_WEBHOOK_SECRET not set): %s\n", sim.WebhookSecret())
	}
	if cfg.APIKey == "" {
		// Only this key's payments send webhooks; the api must use it.
		fmt.Fprintf(os.Stderr, "api key (FLASHSALE_PAYMENT_SIM_API_KEY not set): %s\n", sim.APIKey())
	}
	slog.Info("payment simulator", "url", sim.URL(), "webhook_url", cfg.WebhookURL, "async_delay", cfg.AsyncDelay.String(),
		"chaos", fmt.Sprintf("%+v", cfg.Chaos))
	<-ctx.Done()
	slog.Info("payment simulator stopping", "cause", context.Cause(ctx))
	return sim.Close()
}

// parse reads the environment, then flags (which win).
func parse(getenv func(string) string, args []string, out io.Writer) (string, paysim.Config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var cfg paysim.Config
	fs := flag.NewFlagSet("paysim", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("addr", env("FLASHSALE_PAYMENT_SIM_ADDR", paysim.DefaultAddr), "listen address (FLASHSALE_PAYMENT_SIM_ADDR)")
	fs.StringVar(&cfg.WebhookURL, "webhook-url", env("FLASHSALE_PAYMENT_SIM_WEBHOOK_URL", ""), "where events are POSTed; empty: not delivered (FLASHSALE_PAYMENT_SIM_WEBHOOK_URL)")
	secrets := fs.String("webhook-secret", env("FLASHSALE_PAYMENT_WEBHOOK_SECRET", ""), "comma-separated signing secrets, the first signs; empty: random (FLASHSALE_PAYMENT_WEBHOOK_SECRET)")
	fs.StringVar(&cfg.APIKey, "api-key", env("FLASHSALE_PAYMENT_SIM_API_KEY", ""), "the shop's secret key: only its payments send webhooks; other sk_test_ keys are accounts of their own; empty: random (FLASHSALE_PAYMENT_SIM_API_KEY)")
	public := fs.String("public", env("FLASHSALE_PAYMENT_SIM_PUBLIC", "false"), "listen beyond loopback (FLASHSALE_PAYMENT_SIM_PUBLIC)")
	maxObjects := fs.String("max-objects", env("FLASHSALE_PAYMENT_SIM_MAX_OBJECTS", strconv.Itoa(paysim.DefaultMaxObjects)), "payment objects kept (FLASHSALE_PAYMENT_SIM_MAX_OBJECTS)")
	asyncDelay := fs.String("async-delay", env("FLASHSALE_PAYMENT_SIM_ASYNC_DELAY", paysim.DefaultAsyncDelay.String()), "how long pm_card_async stays processing (FLASHSALE_PAYMENT_SIM_ASYNC_DELAY)")
	dups := fs.String("chaos-duplicates", env("FLASHSALE_PAYMENT_SIM_CHAOS_DUPLICATES", "1"), "deliver every event 1..N times (FLASHSALE_PAYMENT_SIM_CHAOS_DUPLICATES)")
	reorder := fs.String("chaos-reorder", env("FLASHSALE_PAYMENT_SIM_CHAOS_REORDER", "0s"), "hold every delivery a random time up to this, so events overtake each other (FLASHSALE_PAYMENT_SIM_CHAOS_REORDER)")
	delay := fs.String("chaos-delay", env("FLASHSALE_PAYMENT_SIM_CHAOS_DELAY", "0s"), "hold every delivery this long (FLASHSALE_PAYMENT_SIM_CHAOS_DELAY)")
	failRate := fs.String("chaos-fail-rate", env("FLASHSALE_PAYMENT_SIM_CHAOS_FAIL_RATE", "0"), "share of changes answered 500 after being made (FLASHSALE_PAYMENT_SIM_CHAOS_FAIL_RATE)")
	if err := fs.Parse(args); err != nil {
		return "", cfg, err
	}
	if fs.NArg() > 0 {
		return "", cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.WebhookSecrets = list(*secrets)
	var err error
	if k := cfg.APIKey; k != "" && (!strings.HasPrefix(k, "sk_test_") || len(k) < 24 || len(k) > 255) {
		return "", cfg, fmt.Errorf("FLASHSALE_PAYMENT_SIM_API_KEY must be sk_test_ and at least 16 more characters")
	}
	if cfg.Public, err = strconv.ParseBool(*public); err != nil {
		return "", cfg, fmt.Errorf("FLASHSALE_PAYMENT_SIM_PUBLIC %q: want true or false", *public)
	}
	if !cfg.Public && !paysim.Loopback(*addr) {
		return "", cfg, fmt.Errorf("FLASHSALE_PAYMENT_SIM_ADDR %q is not a loopback address: set FLASHSALE_PAYMENT_SIM_PUBLIC=true to listen beyond this host", *addr)
	}
	if cfg.MaxObjects, err = strconv.Atoi(*maxObjects); err != nil || cfg.MaxObjects < 100 || cfg.MaxObjects > 100_000_000 {
		return "", cfg, fmt.Errorf("FLASHSALE_PAYMENT_SIM_MAX_OBJECTS %q: want 100..100000000", *maxObjects)
	}
	if cfg.AsyncDelay, err = duration("async delay", *asyncDelay); err != nil {
		return "", cfg, err
	}
	if cfg.AsyncDelay == 0 {
		return "", cfg, fmt.Errorf("async delay must be positive")
	}
	if cfg.Chaos.ReorderWindow, err = duration("chaos reorder", *reorder); err != nil {
		return "", cfg, err
	}
	if cfg.Chaos.Delay, err = duration("chaos delay", *delay); err != nil {
		return "", cfg, err
	}
	if cfg.Chaos.Duplicates, err = strconv.Atoi(*dups); err != nil || cfg.Chaos.Duplicates < 1 || cfg.Chaos.Duplicates > 100 {
		return "", cfg, fmt.Errorf("chaos duplicates %q: want 1..100", *dups)
	}
	if cfg.Chaos.FailAfterWriteRate, err = strconv.ParseFloat(*failRate, 64); err != nil || cfg.Chaos.FailAfterWriteRate < 0 || cfg.Chaos.FailAfterWriteRate > 1 {
		return "", cfg, fmt.Errorf("chaos fail rate %q: want 0..1", *failRate)
	}
	return *addr, cfg, nil
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func duration(name, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q: want a duration like 5s", name, s)
	}
	return d, nil
}
