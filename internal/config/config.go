// Package config reads flashsale's configuration from FLASHSALE_* environment variables.
// Defaults run locally; an invalid value is an error, never a guess.
package config

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flashsale/flashsale/internal/jwtkeys"
	"github.com/flashsale/flashsale/internal/kafkaconn"
	"github.com/flashsale/flashsale/internal/redisconn"
)

// Config is every setting of the api and the reconciler.
type Config struct {
	HTTPAddr            string
	AdminAddr           string // pprof listener; empty = off
	RedisAddrs          []string
	RedisDB             int
	RedisPrefix         string
	PostgresDSN         string
	PostgresStartWait   time.Duration // how long the reconciler retries Postgres at start
	RedisStartWait      time.Duration // how long both binaries retry Redis at start
	KafkaBrokers        []string      // empty: embedded broker
	EmbeddedKafkaAddr   string
	KafkaTopic          string
	KafkaPartitions     int
	JWTSecret           string
	JWTSecretGenerated  bool
	JWTKeysFile         string       // FLASHSALE_JWT_KEYS: PEM or JWKS of an identity provider
	JWTKeys             *jwtkeys.Set // loaded from JWTKeysFile at Parse; nil when unset
	JWTIssuer           string       // required iss of shopper tokens; empty: not checked
	JWTAudience         string       // required aud of shopper tokens; empty: not checked
	AdminToken          string
	AdminTokenGenerated bool
	// QueueSecrets sign the waiting room's tickets and passes: the first signs, all verify (put
	// a new one first to rotate). Empty: derived from JWTSecret.
	QueueSecrets      []string
	QueueTick         time.Duration // admission step of every item with a waiting room
	DevLogin          bool          // FLASHSALE_DEV_LOGIN; unset: on for a loopback listener without JWTKeysFile
	TokenTTL          time.Duration
	ReservationTTL    time.Duration
	IdempotencyTTL    time.Duration
	LeaderboardSize   int
	RatingPriorMean   float64
	RatingPriorWeight float64
	ExpiryInterval    time.Duration
	ExpiryBatch       int
	SnapshotInterval  time.Duration
	PurchaseBatch     int
	PurchaseInFlight  int
	PurchaseLinger    time.Duration // 0: a hot item's next call never waits
	TrustedProxies    []string
	LimitPurchase     Limit
	LimitPay          Limit
	LimitCancel       Limit
	LimitRating       Limit
	LimitLoginUser    Limit
	LimitLoginIP      Limit
	LimitReads        Limit         // order reads and waiting-room polls that reach Redis, per user, per api
	ReconcileInterval time.Duration // 0 = batch only on demand
	OrderRetention    time.Duration // how long a final order stays in Redis (the reconciler prunes it then)
	ShutdownTimeout   time.Duration // SIGTERM to exit, the drain included
	ShutdownDrain     time.Duration // /readyz answers 503 this long before the listener closes
	HTTPReadTimeout   time.Duration // a whole request, body included (slow clients)
	HTTPWriteTimeout  time.Duration // a whole answer
	HTTPIdleTimeout   time.Duration // a keep-alive connection between requests
	StreamHeartbeat   time.Duration // a comment on every catalogue stream at least this often
	StreamPerClient   int           // catalogue streams one client address may hold
	StreamMax         int           // catalogue streams in all (the api lowers it to fit its descriptors)
	HTTPMaxConns      int           // connections in all; 0: from the open-file limit
	HTTPMaxConnsPerIP int           // connections per client address (trusted proxies: total only)
	OpsAddr           string        // an extra listener for /healthz, /readyz and /metrics; empty: none
	LogLevel          slog.Level    // FLASHSALE_LOG_LEVEL: debug, info, warn, error
	AccessLogSlow     time.Duration // requests at least this long log at warn; 0: none by duration
	AccessLogSample   int           // one request in this many logs at info; 0: none
	OutboxMax         int           // outbox entries (all items) above which purchases answer 503
	Redis             redisconn.Security
	Kafka             kafkaconn.Security
	// Replication: the primary found through Sentinel, and how many replicas must hold a
	// change before it is acknowledged (see redisconn.Options).
	RedisSentinels        []string      // FLASHSALE_REDIS_SENTINELS: host:port of Sentinels; empty: none
	RedisMasterName       string        // FLASHSALE_REDIS_MASTER_NAME: the primary's name at the Sentinels
	RedisSentinelPassword string        // FLASHSALE_REDIS_SENTINEL_PASSWORD: the Sentinels' own password
	RedisAckReplicas      int           // FLASHSALE_REDIS_ACK_REPLICAS: replicas that must hold a change (redisconn.AckAuto: auto)
	RedisAckTimeout       time.Duration // FLASHSALE_REDIS_ACK_TIMEOUT: how long WAIT waits for them
	RedisSentinelLease    time.Duration // FLASHSALE_REDIS_SENTINEL_LEASE: changes go on this long without a Sentinel majority
	Payment               Payment
}

// Payment is the payment provider's configuration (see the contract's "Payment").
type Payment struct {
	Provider        string        // FLASHSALE_PAYMENT_PROVIDER: sim, stripe or none
	SimAddr         string        // where the simulator listens (the api starts one unless one answers)
	SimWebhookURL   string        // where the simulator delivers webhooks; "" = this api's own
	SimAsyncDelay   time.Duration // how long pm_card_async takes to succeed
	WebhookSecrets  []string      // signing secrets; the first signs (the simulator), all verify
	SecretGenerated bool          // WebhookSecrets is one random secret made at start (sim)
	SimAPIKey       string        // the secret key the api uses with the simulator
	SimKeyGenerated bool          // SimAPIKey is a random key made at start (sim)
	SimPublic       bool          // the simulator may listen beyond loopback
	SimMaxObjects   int           // payment objects the simulator keeps
	StripeAPIBase   string        // Stripe's API base URL (tests point it at the simulator)
	StripeSecretKey string
	Currency        string        // ISO 4217, lower case
	ProcessingHold  time.Duration // how long a processing payment holds its reservation past expires_at
	PublicURL       string        // the shop's URL as shoppers reach it (Checkout returns there); "": the request's host
}

// WebhookURL is where the simulator delivers webhooks: FLASHSALE_PAYMENT_SIM_WEBHOOK_URL, or
// this api's own route.
func (c Config) WebhookURL() string {
	if c.Payment.SimWebhookURL != "" {
		return c.Payment.SimWebhookURL
	}
	return "http://" + c.HTTPAddr + "/api/payments/webhook"
}

// ErrInvalid marks a start-up error that is a setting's fault (the binaries exit 2 on it),
// found only once the process looked around (e.g. a simulator it did not start).
var ErrInvalid = errors.New("invalid setting")

// Defaults is the configuration of an empty environment: every setting at its default (tests
// and tools take the values the binaries run with from here).
func Defaults() Config {
	c, err := Parse(func(string) string { return "" })
	if err != nil {
		panic(err) // the defaults are valid: TestDefaults holds it
	}
	return c
}

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return Parse(os.Getenv) }

// Parse reads the configuration through getenv (tests pass a map lookup).
func Parse(getenv func(string) string) (Config, error) { return parse(&parser{getenv: getenv}) }

// parse reads every setting, then checks them in steps (secrets, pacing, dev login, network,
// durations, payment), filling in the secrets left unset; the first refusal is the error.
func parse(p *parser) (Config, error) {
	c, devLogin := p.settings()
	if p.err != nil {
		return Config{}, p.err
	}
	if err := c.checkSecrets(); err != nil {
		return Config{}, err
	}
	if err := c.checkPacing(); err != nil {
		return Config{}, err
	}
	if err := c.setDevLogin(devLogin); err != nil {
		return Config{}, err
	}
	if c.JWTSecret == "" {
		c.JWTSecret, c.JWTSecretGenerated = randomHex(32), true
	}
	if c.AdminToken == "" {
		c.AdminToken, c.AdminTokenGenerated = randomHex(24), true
	}
	if err := c.checkNetwork(p.getenv("FLASHSALE_REDIS_ADDRS") != ""); err != nil {
		return Config{}, err
	}
	if err := c.checkDurations(); err != nil {
		return Config{}, err
	}
	if err := c.checkPayment(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// settings reads every setting with its default and range, and FLASHSALE_DEV_LOGIN as written
// (its default depends on other settings: see setDevLogin).
func (p *parser) settings() (c Config, devLogin string) {
	c = Config{
		HTTPAddr:          p.str("FLASHSALE_HTTP_ADDR", "127.0.0.1:8080"),
		AdminAddr:         p.str("FLASHSALE_ADMIN_ADDR", ""),
		RedisAddrs:        p.list("FLASHSALE_REDIS_ADDRS", "127.0.0.1:6379"),
		RedisDB:           p.integer("FLASHSALE_REDIS_DB", 0, 0, 15),
		RedisPrefix:       p.str("FLASHSALE_REDIS_PREFIX", "fs:"),
		PostgresDSN:       p.dsn("FLASHSALE_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/flashsale?sslmode=disable"),
		PostgresStartWait: p.duration("FLASHSALE_POSTGRES_START_TIMEOUT", time.Minute),
		RedisStartWait:    p.duration("FLASHSALE_REDIS_START_TIMEOUT", time.Minute),
		KafkaBrokers:      p.list("KAFKA_BROKERS", ""),
		EmbeddedKafkaAddr: p.str("FLASHSALE_EMBEDDED_KAFKA_ADDR", "127.0.0.1:9092"),
		KafkaTopic:        p.str("FLASHSALE_KAFKA_TOPIC", "flashsale.orders"),
		KafkaPartitions:   p.integer("FLASHSALE_KAFKA_PARTITIONS", 3, 1, 1024),
		JWTSecret:         p.str("FLASHSALE_JWT_SECRET", ""),
		JWTKeysFile:       p.str("FLASHSALE_JWT_KEYS", ""),
		JWTIssuer:         p.str("FLASHSALE_JWT_ISSUER", ""),
		JWTAudience:       p.str("FLASHSALE_JWT_AUDIENCE", ""),
		AdminToken:        p.str("FLASHSALE_ADMIN_TOKEN", ""),
		QueueSecrets:      p.list("FLASHSALE_QUEUE_SECRET", ""),
		QueueTick:         p.duration("FLASHSALE_QUEUE_TICK", 200*time.Millisecond),
		TokenTTL:          p.duration("FLASHSALE_TOKEN_TTL", 24*time.Hour),
		ReservationTTL:    p.duration("FLASHSALE_RESERVATION_TTL", 10*time.Minute),
		IdempotencyTTL:    p.duration("FLASHSALE_IDEMPOTENCY_TTL", 24*time.Hour),
		LeaderboardSize:   p.integer("FLASHSALE_LEADERBOARD_SIZE", 100, 1, 10000),
		RatingPriorMean:   p.float("FLASHSALE_RATING_PRIOR_MEAN", 3.5, 1, 5),
		RatingPriorWeight: p.float("FLASHSALE_RATING_PRIOR_WEIGHT", 10, 0, 1e6),
		ExpiryInterval:    p.duration("FLASHSALE_EXPIRY_INTERVAL", 250*time.Millisecond),
		ExpiryBatch:       p.integer("FLASHSALE_EXPIRY_BATCH", 200, 1, 250),
		SnapshotInterval:  p.duration("FLASHSALE_SNAPSHOT_INTERVAL", 500*time.Millisecond),
		PurchaseBatch:     p.integer("FLASHSALE_PURCHASE_BATCH", 96, 1, 256),
		PurchaseInFlight:  p.integer("FLASHSALE_PURCHASE_IN_FLIGHT", 2, 1, 16),
		PurchaseLinger:    p.duration("FLASHSALE_PURCHASE_LINGER", 2*time.Millisecond),
		TrustedProxies:    p.list("FLASHSALE_TRUSTED_PROXIES", ""),
		LimitPurchase:     p.limit("FLASHSALE_LIMIT_PURCHASE", "5/1s:10"),
		LimitPay:          p.limit("FLASHSALE_LIMIT_PAY", "5/1s:10"),
		LimitCancel:       p.limit("FLASHSALE_LIMIT_CANCEL", "5/1s:10"),
		LimitRating:       p.limit("FLASHSALE_LIMIT_RATING", "2/1s:5"),
		LimitLoginUser:    p.limit("FLASHSALE_LIMIT_LOGIN_USER", "10/1m:10"),
		LimitLoginIP:      p.limit("FLASHSALE_LIMIT_LOGIN_IP", "10/1m:10"),
		LimitReads:        p.limit("FLASHSALE_LIMIT_READS", "10/1s:20"),
		ReconcileInterval: p.duration("FLASHSALE_RECONCILE_INTERVAL", 0),
		OrderRetention:    p.duration("FLASHSALE_ORDER_RETENTION", 720*time.Hour),
		ShutdownTimeout:   p.duration("FLASHSALE_SHUTDOWN_TIMEOUT", 10*time.Second),
		ShutdownDrain:     p.duration("FLASHSALE_SHUTDOWN_DRAIN", 0),
		HTTPReadTimeout:   p.duration("FLASHSALE_HTTP_READ_TIMEOUT", 15*time.Second),
		HTTPWriteTimeout:  p.duration("FLASHSALE_HTTP_WRITE_TIMEOUT", 30*time.Second),
		HTTPIdleTimeout:   p.duration("FLASHSALE_HTTP_IDLE_TIMEOUT", 60*time.Second),
		StreamHeartbeat:   p.duration("FLASHSALE_STREAM_HEARTBEAT", 15*time.Second),
		StreamPerClient:   p.integer("FLASHSALE_STREAM_PER_CLIENT", 32, 1, 1_000_000),
		StreamMax:         p.integer("FLASHSALE_STREAM_MAX", 20_000, 1, 10_000_000),
		HTTPMaxConns:      p.integer("FLASHSALE_HTTP_MAX_CONNS", 0, 0, 10_000_000),
		HTTPMaxConnsPerIP: p.integer("FLASHSALE_HTTP_MAX_CONNS_PER_CLIENT", 256, 1, 10_000_000),
		OpsAddr:           p.str("FLASHSALE_OPS_ADDR", ""),
		LogLevel:          p.level("FLASHSALE_LOG_LEVEL", slog.LevelInfo),
		AccessLogSlow:     p.duration("FLASHSALE_ACCESS_LOG_SLOW", time.Second),
		AccessLogSample:   p.integer("FLASHSALE_ACCESS_LOG_SAMPLE", 0, 0, 1_000_000),
		OutboxMax:         p.integer("FLASHSALE_OUTBOX_MAX", 1_000_000, 1, 1<<40),
		Redis: redisconn.Security{
			Username: p.str("FLASHSALE_REDIS_USERNAME", ""), Password: p.str("FLASHSALE_REDIS_PASSWORD", ""),
			TLS: p.tls("FLASHSALE_REDIS_TLS", "FLASHSALE_REDIS_CA_FILE"),
		},
		Kafka: kafkaconn.Security{
			Mechanism: p.str("KAFKA_SASL_MECHANISM", ""),
			Username:  p.str("KAFKA_USERNAME", ""), Password: p.str("KAFKA_PASSWORD", ""),
			TLS: p.tls("KAFKA_TLS", "KAFKA_CA_FILE"),
		},
		Payment: Payment{
			Provider:        p.str("FLASHSALE_PAYMENT_PROVIDER", "sim"),
			SimAddr:         p.str("FLASHSALE_PAYMENT_SIM_ADDR", "127.0.0.1:8090"),
			SimWebhookURL:   p.str("FLASHSALE_PAYMENT_SIM_WEBHOOK_URL", ""),
			SimAsyncDelay:   p.duration("FLASHSALE_PAYMENT_SIM_ASYNC_DELAY", 5*time.Second),
			SimAPIKey:       p.str("FLASHSALE_PAYMENT_SIM_API_KEY", ""),
			SimPublic:       p.boolean("FLASHSALE_PAYMENT_SIM_PUBLIC", false),
			SimMaxObjects:   p.integer("FLASHSALE_PAYMENT_SIM_MAX_OBJECTS", 100_000, 100, 100_000_000),
			WebhookSecrets:  p.list("FLASHSALE_PAYMENT_WEBHOOK_SECRET", ""),
			StripeAPIBase:   p.str("FLASHSALE_STRIPE_API_BASE", "https://api.stripe.com"),
			StripeSecretKey: p.str("FLASHSALE_STRIPE_SECRET_KEY", ""),
			Currency:        p.str("FLASHSALE_CURRENCY", "usd"),
			ProcessingHold:  p.duration("FLASHSALE_PAYMENT_PROCESSING_HOLD", 30*time.Minute),
			PublicURL:       p.str("FLASHSALE_PUBLIC_URL", ""),
		},
	}
	// Redis replication: where the primary is, and what acknowledges a change.
	c.RedisSentinels = p.list("FLASHSALE_REDIS_SENTINELS", "")
	c.RedisMasterName = p.str("FLASHSALE_REDIS_MASTER_NAME", "mymaster")
	c.RedisSentinelPassword = p.str("FLASHSALE_REDIS_SENTINEL_PASSWORD", "")
	c.RedisAckReplicas = p.ackReplicas("FLASHSALE_REDIS_ACK_REPLICAS")
	c.RedisAckTimeout = p.duration("FLASHSALE_REDIS_ACK_TIMEOUT", 250*time.Millisecond)
	c.RedisSentinelLease = p.duration("FLASHSALE_REDIS_SENTINEL_LEASE", 2*time.Second)
	devLogin = p.read("FLASHSALE_DEV_LOGIN", "") // its default depends on others: setDevLogin
	return c, devLogin
}

// checkSecrets loads the key file and refuses secrets too short or left as placeholders.
func (c *Config) checkSecrets() error {
	// The key file is read once, here: a missing or wrong file stops the start, not a shopper.
	if c.JWTKeysFile != "" {
		keys, err := jwtkeys.Load(c.JWTKeysFile)
		if err != nil {
			return fmt.Errorf("config: FLASHSALE_JWT_KEYS: %w", err)
		}
		c.JWTKeys = keys
	}
	// A secret that is set must be one: long enough, and not a placeholder someone forgot.
	if c.JWTSecret != "" && (len(c.JWTSecret) < 32 || placeholder(c.JWTSecret)) {
		return fmt.Errorf("config: FLASHSALE_JWT_SECRET must be at least 32 bytes and not a placeholder (scripts/dotenv.sh makes one)")
	}
	if c.AdminToken != "" && (utf8.RuneCountInString(c.AdminToken) < 24 || placeholder(c.AdminToken)) {
		return fmt.Errorf("config: FLASHSALE_ADMIN_TOKEN must be at least 24 characters and not a placeholder (scripts/dotenv.sh makes one)")
	}
	for _, s := range c.QueueSecrets {
		if len(s) < 32 || placeholder(s) {
			return fmt.Errorf("config: every FLASHSALE_QUEUE_SECRET must be at least 32 bytes and not a placeholder")
		}
	}
	return nil
}

// checkPacing bounds the waiting room's tick and the purchase batcher's linger.
func (c *Config) checkPacing() error {
	if c.QueueTick < time.Millisecond || c.QueueTick > 10*time.Second {
		return fmt.Errorf("config: FLASHSALE_QUEUE_TICK must be 1ms..10s")
	}
	if c.PurchaseLinger > 100*time.Millisecond {
		return fmt.Errorf("config: FLASHSALE_PURCHASE_LINGER must be 0..100ms (every purchase of a hot item may wait that long)")
	}
	return nil
}

// setDevLogin decides dev login from FLASHSALE_DEV_LOGIN as written (devLogin) and checks where
// the embedded broker listens.
func (c *Config) setDevLogin(devLogin string) error {
	// Dev login lets anyone become anyone: on by default only where nobody else can reach it (a
	// loopback listener) and no identity provider signs the tokens. Its tokens are HS256, which
	// a key file turns off: asking for both is a contradiction, not something to guess about.
	switch devLogin {
	case "":
		c.DevLogin = loopback(c.HTTPAddr) && c.JWTKeysFile == ""
	default:
		b, err := strconv.ParseBool(devLogin)
		if err != nil {
			return fmt.Errorf("config: FLASHSALE_DEV_LOGIN=%q: want true or false", devLogin)
		}
		c.DevLogin = b
	}
	if c.DevLogin && c.JWTKeysFile != "" {
		return fmt.Errorf("config: FLASHSALE_DEV_LOGIN=true mints HS256 tokens, which FLASHSALE_JWT_KEYS turns off; unset one of them")
	}
	// The embedded broker has no TLS: only processes of this host may reach it.
	if len(c.KafkaBrokers) == 0 && !loopback(c.EmbeddedKafkaAddr) {
		return fmt.Errorf("config: FLASHSALE_EMBEDDED_KAFKA_ADDR=%q: the embedded broker has no TLS, so it listens on a loopback address only (127.0.0.1, ::1, localhost); use KAFKA_BROKERS for a broker others reach", c.EmbeddedKafkaAddr)
	}
	return nil
}

// checkNetwork checks the trusted proxies, the Kafka and Redis connections and the listening
// addresses; addrsSet says whether FLASHSALE_REDIS_ADDRS was set.
func (c *Config) checkNetwork(addrsSet bool) error {
	// Gin would trust anything it cannot parse as no proxy at all: refuse instead of guessing
	// whom to trust with X-Forwarded-For.
	for _, px := range c.TrustedProxies {
		if _, _, err := net.ParseCIDR(px); err != nil && net.ParseIP(px) == nil {
			return fmt.Errorf("config: FLASHSALE_TRUSTED_PROXIES: %q is neither an IP address nor a CIDR range", px)
		}
	}
	if err := c.Kafka.Check(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if c.Kafka.TLS != nil && len(c.KafkaBrokers) == 0 {
		return fmt.Errorf("config: KAFKA_TLS is for KAFKA_BROKERS; the embedded broker has no TLS")
	}
	if len(c.KafkaBrokers) == 0 && c.Kafka.Mechanism == "" && (c.Kafka.Username == "") != (c.Kafka.Password == "") {
		return fmt.Errorf("config: KAFKA_USERNAME and KAFKA_PASSWORD go together (the embedded broker's login)")
	}
	if len(c.RedisAddrs) == 0 {
		return fmt.Errorf("config: FLASHSALE_REDIS_ADDRS: at least one address is needed")
	}
	if err := c.checkReplication(addrsSet); err != nil {
		return err
	}
	if err := checkAddrs(*c); err != nil {
		return err
	}
	return nil
}

// checkDurations checks the TTLs, timeouts and intervals against each other.
func (c *Config) checkDurations() error {
	// The scripts work in whole milliseconds: anything shorter would round to 0.
	if c.ReservationTTL < time.Millisecond || c.IdempotencyTTL < time.Millisecond || c.TokenTTL < time.Second {
		return fmt.Errorf("config: reservation and idempotency TTLs must be at least 1ms, the token TTL at least 1s")
	}
	// A replay must find its order for as long as the order can be paid; a shorter idempotency
	// TTL would let a retry inside the payment window take stock a second time.
	if c.IdempotencyTTL < c.ReservationTTL {
		return fmt.Errorf("config: FLASHSALE_IDEMPOTENCY_TTL (%s) must be at least FLASHSALE_RESERVATION_TTL (%s)", c.IdempotencyTTL, c.ReservationTTL)
	}
	// An idempotent replay must find its order for the whole window: a final order leaves
	// Redis after the retention, so the retention may not be shorter.
	if c.OrderRetention < c.IdempotencyTTL {
		return fmt.Errorf("config: FLASHSALE_ORDER_RETENTION (%s) must be at least FLASHSALE_IDEMPOTENCY_TTL (%s): a replay within the idempotency window must find its order", c.OrderRetention, c.IdempotencyTTL)
	}
	if c.HTTPReadTimeout < time.Millisecond || c.HTTPWriteTimeout < time.Millisecond || c.HTTPIdleTimeout < time.Millisecond {
		return fmt.Errorf("config: the HTTP read, write and idle timeouts must be at least 1ms")
	}
	if c.StreamHeartbeat < 10*time.Millisecond || c.StreamHeartbeat > 15*time.Second {
		return fmt.Errorf("config: FLASHSALE_STREAM_HEARTBEAT must be from 10ms to 15s (the contract's longest gap)")
	}
	// The drain is part of the shutdown's time: requests in flight when it ends need some too.
	if c.ShutdownTimeout < time.Millisecond || c.ShutdownDrain >= c.ShutdownTimeout {
		return fmt.Errorf("config: FLASHSALE_SHUTDOWN_TIMEOUT (%s) must be at least 1ms and longer than FLASHSALE_SHUTDOWN_DRAIN (%s)", c.ShutdownTimeout, c.ShutdownDrain)
	}
	if c.PostgresStartWait < time.Second || c.RedisStartWait < time.Second {
		return fmt.Errorf("config: FLASHSALE_POSTGRES_START_TIMEOUT and FLASHSALE_REDIS_START_TIMEOUT must be at least 1s")
	}
	if c.ExpiryInterval < time.Millisecond || c.SnapshotInterval < time.Millisecond {
		return fmt.Errorf("config: expiry and snapshot intervals must be at least 1ms")
	}
	return nil
}

// checkPayment checks the payment settings and fills in the simulator's secrets left unset.
func (c *Config) checkPayment() error {
	if err := c.Payment.check(); err != nil {
		return err
	}
	if c.Payment.Provider == "sim" && len(c.Payment.WebhookSecrets) == 0 {
		c.Payment.WebhookSecrets, c.Payment.SecretGenerated = []string{"whsec_" + randomHex(32)}, true
	}
	if c.Payment.Provider == "sim" && c.Payment.SimAPIKey == "" {
		c.Payment.SimAPIKey, c.Payment.SimKeyGenerated = "sk_test_"+randomHex(24), true
	}
	return nil
}

// checkReplication checks the Sentinel and acknowledgement settings; addrsSet reports whether
// FLASHSALE_REDIS_ADDRS was given (Sentinel names the primary, so both would be a guess).
func (c Config) checkReplication(addrsSet bool) error {
	if len(c.RedisSentinels) > 0 {
		if addrsSet {
			return fmt.Errorf("config: FLASHSALE_REDIS_SENTINELS and FLASHSALE_REDIS_ADDRS exclude each other: the Sentinels name the primary")
		}
		for _, a := range c.RedisSentinels {
			host, port, err := net.SplitHostPort(a)
			if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
				return fmt.Errorf("config: FLASHSALE_REDIS_SENTINELS: %q is not host:port", a)
			}
		}
		if strings.ContainsAny(c.RedisMasterName, " \t\r\n") {
			return fmt.Errorf("config: FLASHSALE_REDIS_MASTER_NAME=%q: a name without spaces, as the Sentinels know the primary", c.RedisMasterName)
		}
	} else if c.RedisSentinelPassword != "" {
		return fmt.Errorf("config: FLASHSALE_REDIS_SENTINEL_PASSWORD is for FLASHSALE_REDIS_SENTINELS, which is unset")
	}
	// WAIT with 0 waits for ever, and one send of a script with its WAIT must fit in
	// exactlyonce.AttemptTimeout (2s) with room for the script.
	if c.RedisAckTimeout < time.Millisecond || c.RedisAckTimeout > time.Second {
		return fmt.Errorf("config: FLASHSALE_REDIS_ACK_TIMEOUT=%s: want 1ms..1s", c.RedisAckTimeout)
	}
	// The lease must end before the Sentinels may promote another node (their down-after
	// time, checked against them at start); a look at them takes up to a second.
	if c.RedisSentinelLease < 500*time.Millisecond || c.RedisSentinelLease > time.Minute {
		return fmt.Errorf("config: FLASHSALE_REDIS_SENTINEL_LEASE=%s: want 500ms..1m, shorter than the Sentinels' down-after-milliseconds", c.RedisSentinelLease)
	}
	return nil
}

// check validates the payment settings: a known provider, a currency code, and with stripe a
// secret key and webhook secrets that are real ones.
func (p Payment) check() error {
	switch p.Provider {
	case "sim", "stripe", "none":
	default:
		return fmt.Errorf("config: FLASHSALE_PAYMENT_PROVIDER=%q: want sim, stripe or none", p.Provider)
	}
	if !currencyCode.MatchString(p.Currency) {
		return fmt.Errorf("config: FLASHSALE_CURRENCY=%q: want a three-letter lower-case ISO 4217 code", p.Currency)
	}
	if p.SimAsyncDelay < 0 || p.SimAsyncDelay > time.Hour {
		return fmt.Errorf("config: FLASHSALE_PAYMENT_SIM_ASYNC_DELAY must be 0..1h")
	}
	if _, _, err := net.SplitHostPort(p.SimAddr); err != nil {
		return fmt.Errorf("config: FLASHSALE_PAYMENT_SIM_ADDR=%q: want host:port", p.SimAddr)
	}
	if p.Provider == "sim" && !p.SimPublic && !loopback(p.SimAddr) {
		return fmt.Errorf("config: FLASHSALE_PAYMENT_SIM_ADDR=%q is not a loopback address: the simulator takes any test key, so it listens beyond this host only with FLASHSALE_PAYMENT_SIM_PUBLIC=true", p.SimAddr)
	}
	if k := p.SimAPIKey; k != "" && (!strings.HasPrefix(k, "sk_test_") || len(k) < 24 || len(k) > 255 || placeholder(k)) {
		return fmt.Errorf("config: FLASHSALE_PAYMENT_SIM_API_KEY must be a test key: sk_test_ and at least 16 more characters")
	}
	if p.ProcessingHold < 0 || p.ProcessingHold > 23*time.Hour {
		return fmt.Errorf("config: FLASHSALE_PAYMENT_PROCESSING_HOLD=%s: want 0s..23h", p.ProcessingHold)
	}
	for _, u := range []string{p.SimWebhookURL, p.StripeAPIBase, p.PublicURL} {
		if u == "" {
			continue
		}
		if v, err := url.Parse(u); err != nil || (v.Scheme != "http" && v.Scheme != "https") || v.Host == "" {
			return fmt.Errorf("config: %q is not an http(s) URL (FLASHSALE_PAYMENT_SIM_WEBHOOK_URL, FLASHSALE_STRIPE_API_BASE, FLASHSALE_PUBLIC_URL)", u)
		}
	}
	for _, s := range p.WebhookSecrets {
		if len(s) < 32 || placeholder(s) {
			return fmt.Errorf("config: every FLASHSALE_PAYMENT_WEBHOOK_SECRET must be at least 32 bytes and not a placeholder")
		}
	}
	if p.Provider == "stripe" {
		if len(p.WebhookSecrets) == 0 {
			return fmt.Errorf("config: FLASHSALE_PAYMENT_PROVIDER=stripe needs FLASHSALE_PAYMENT_WEBHOOK_SECRET (32+ bytes)")
		}
		if p.StripeSecretKey == "" || placeholder(p.StripeSecretKey) {
			return fmt.Errorf("config: FLASHSALE_PAYMENT_PROVIDER=stripe needs FLASHSALE_STRIPE_SECRET_KEY")
		}
	}
	return nil
}

// RedisOptions is how both binaries reach Redis: the addresses or the Sentinels, the login,
// and the replicas a change must reach.
func (c Config) RedisOptions() redisconn.Options {
	return redisconn.Options{
		Addrs: c.RedisAddrs, DB: c.RedisDB, Security: c.Redis,
		Sentinels: c.RedisSentinels, MasterName: c.RedisMasterName, SentinelPassword: c.RedisSentinelPassword,
		AckReplicas: c.RedisAckReplicas, AckTimeout: c.RedisAckTimeout, SentinelLease: c.RedisSentinelLease,
	}
}

// loopback reports whether addr (host:port) names a loopback host: a loopback IP or
// "localhost". An empty host is every interface; any other name is not guessed at.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var currencyCode = regexp.MustCompile(`^[a-z]{3}$`)

// placeholder reports a secret copied from an example rather than made: the words examples
// use for "put yours here".
func placeholder(s string) bool {
	l := strings.ToLower(s)
	for _, w := range []string{"change-me", "changeme", "change_me", "placeholder", "example", "your-secret", "secret-here"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// KafkaSecurity is how both binaries log in to Kafka: KAFKA_SASL_MECHANISM and the rest
// towards KAFKA_BROKERS; towards the embedded broker, its deployment's login
// (kafkaconn.EmbeddedLogin: KAFKA_USERNAME/KAFKA_PASSWORD, or the credentials kept beside its
// log), which the api's broker requires.
func (c Config) KafkaSecurity() (kafkaconn.Security, error) {
	if len(c.KafkaBrokers) > 0 {
		return c.Kafka, nil
	}
	dir, err := kafkaconn.EmbeddedDir(c.EmbeddedKafkaAddr)
	if err != nil {
		return kafkaconn.Security{}, err
	}
	return kafkaconn.EmbeddedLogin(dir, c.Kafka)
}

// Brokers are the Kafka brokers both binaries use: KAFKA_BROKERS, or the api's embedded
// broker (FLASHSALE_EMBEDDED_KAFKA_ADDR) when that is unset.
func (c Config) Brokers() []string {
	if len(c.KafkaBrokers) > 0 {
		return c.KafkaBrokers
	}
	return []string{c.EmbeddedKafkaAddr}
}

// Masked returns a copy safe to log: secrets are replaced, and the password inside the
// Postgres DSN is masked.
func (c Config) Masked() Config {
	c.JWTSecret = "***"
	c.AdminToken = "***"
	if len(c.QueueSecrets) > 0 {
		c.QueueSecrets = []string{"***"}
	}
	if c.Redis.Password != "" {
		c.Redis.Password = "***"
	}
	if c.RedisSentinelPassword != "" {
		c.RedisSentinelPassword = "***"
	}
	if c.Kafka.Password != "" {
		c.Kafka.Password = "***"
	}
	if len(c.Payment.WebhookSecrets) > 0 {
		c.Payment.WebhookSecrets = []string{"***"}
	}
	if c.Payment.StripeSecretKey != "" {
		c.Payment.StripeSecretKey = "***"
	}
	c.PostgresDSN = maskDSN(c.PostgresDSN)
	return c
}

// maskDSN hides the passwords of a Postgres DSN in both forms pgx takes: a URL (the user
// info's password, and password or sslpassword query parameters) or keyword=value pairs
// (password, sslpassword; a value bare or single-quoted).
func maskDSN(dsn string) string {
	if !strings.Contains(dsn, "://") {
		return dsnPassword.ReplaceAllString(dsn, "${1}=xxxxx")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "***" // unparsable: it may hold anything
	}
	if u.RawQuery != "" {
		params := strings.Split(u.RawQuery, "&")
		for i, p := range params {
			k, _, _ := strings.Cut(p, "=")
			if key, err := url.QueryUnescape(k); err != nil || strings.HasSuffix(strings.ToLower(key), "password") {
				params[i] = k + "=xxxxx"
			}
		}
		u.RawQuery = strings.Join(params, "&")
	}
	return u.Redacted()
}

// dsnPassword is a password setting of a keyword=value DSN and its value.
var dsnPassword = regexp.MustCompile(`(?i)\b(\w*password)\s*=\s*(?:'(?:[^'\\]|\\.)*'?|\S*)`)

// LogValue logs the configuration as structured fields, secrets masked, durations as text.
func (c Config) LogValue() slog.Value {
	m := c.Masked()
	return slog.GroupValue(
		slog.String("http_addr", m.HTTPAddr), slog.Any("redis_addrs", m.RedisAddrs),
		slog.String("redis_prefix", m.RedisPrefix), slog.Bool("redis_tls", m.Redis.TLS != nil),
		slog.Any("redis_sentinels", m.RedisSentinels), slog.String("redis_master_name", m.RedisMasterName),
		slog.String("redis_ack_replicas", ackText(m.RedisAckReplicas)), slog.String("redis_ack_timeout", m.RedisAckTimeout.String()),
		slog.String("redis_sentinel_lease", m.RedisSentinelLease.String()),
		slog.String("postgres_dsn", m.PostgresDSN), slog.Any("kafka_brokers", m.Brokers()),
		slog.String("kafka_topic", m.KafkaTopic), slog.String("kafka_sasl", m.Kafka.Mechanism),
		slog.Bool("dev_login", m.DevLogin), slog.String("jwt_keys", m.JWTKeysFile), slog.Any("jwt_kids", m.jwtKIDs()),
		slog.String("jwt_issuer", m.JWTIssuer), slog.String("jwt_audience", m.JWTAudience),
		slog.String("reservation_ttl", m.ReservationTTL.String()),
		slog.String("idempotency_ttl", m.IdempotencyTTL.String()), slog.Int("outbox_max", m.OutboxMax),
		slog.String("order_retention", m.OrderRetention.String()),
		slog.String("purchase_limit", m.LimitPurchase.String()), slog.Int("purchase_batch", m.PurchaseBatch),
		slog.Int("purchase_in_flight", m.PurchaseInFlight),
		slog.Duration("purchase_linger", m.PurchaseLinger), slog.String("reads_limit", m.LimitReads.String()),
		slog.String("log_level", m.LogLevel.String()), slog.String("access_log_slow", m.AccessLogSlow.String()),
		slog.Int("access_log_sample", m.AccessLogSample),
		slog.Int("stream_per_client", m.StreamPerClient), slog.Int("stream_max", m.StreamMax),
		slog.String("shutdown_timeout", m.ShutdownTimeout.String()), slog.String("shutdown_drain", m.ShutdownDrain.String()),
		slog.String("payment_provider", m.Payment.Provider), slog.String("currency", m.Payment.Currency),
	)
}

func (c Config) jwtKIDs() []string {
	if c.JWTKeys == nil {
		return nil
	}
	return c.JWTKeys.KIDs()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

type parser struct {
	getenv func(string) string
	err    error
	// defaults, when not nil, gets every variable read and its default as text: the README's
	// configuration table is checked against it (docs_test.go).
	defaults map[string]string
}

// read returns the variable's value and notes its default.
func (p *parser) read(name, def string) string {
	if p.defaults != nil {
		p.defaults[name] = def
	}
	return p.getenv(name)
}

func (p *parser) fail(name, v, want string) {
	if p.err == nil {
		p.err = fmt.Errorf("config: %s=%q: %s", name, v, want)
	}
}

func (p *parser) str(name, def string) string {
	if v := p.read(name, def); v != "" {
		return v
	}
	return def
}

// dsn is a Postgres connection string as pgx reads it (URL or key=value); a malformed one is
// an invalid setting, named with its password masked, not a server that cannot be reached.
func (p *parser) dsn(name, def string) string {
	v := p.str(name, def)
	if err := checkDSN(v); err != nil && p.err == nil {
		p.err = fmt.Errorf("config: %s=%q: not a Postgres connection string (postgres://user:password@host:5432/db?sslmode=disable): %w",
			name, maskDSN(v), err)
	}
	return v
}

// checkDSN reports what is wrong with a Postgres connection string as pgx reads it (URL or
// key=value), without the string itself (which may hold a password); nil when it parses.
func checkDSN(dsn string) error {
	_, err := pgconn.ParseConfig(dsn)
	if err == nil {
		return nil
	}
	msg := err.Error()
	if i := strings.Index(msg, "`: "); i >= 0 && strings.HasPrefix(msg, "cannot parse `") {
		msg = msg[i+3:] // pgx quotes the whole string
	}
	return errors.New(msg)
}

func (p *parser) list(name, def string) []string {
	var out []string
	for _, s := range strings.Split(p.str(name, def), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) integer(name string, def, lo, hi int) int {
	v := p.read(name, strconv.Itoa(def))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.fail(name, v, fmt.Sprintf("want an integer in %d..%d", lo, hi))
	}
	return n
}

// ackReplicas reads FLASHSALE_REDIS_ACK_REPLICAS: auto (every replica that could be
// promoted) or a number of replicas, 0..16.
func (p *parser) ackReplicas(name string) int {
	v := p.read(name, "auto")
	if v == "" || v == "auto" {
		return redisconn.AckAuto
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 16 {
		p.fail(name, v, "want auto (every replica that could be promoted) or an integer in 0..16")
	}
	return n
}

// ackText is FLASHSALE_REDIS_ACK_REPLICAS as an operator writes it.
func ackText(n int) string {
	if n == redisconn.AckAuto {
		return "auto"
	}
	return strconv.Itoa(n)
}

func (p *parser) float(name string, def, lo, hi float64) float64 {
	v := p.read(name, strconv.FormatFloat(def, 'g', -1, 64))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < lo || f > hi {
		p.fail(name, v, fmt.Sprintf("want a number in %g..%g", lo, hi))
	}
	return f
}

func (p *parser) boolean(name string, def bool) bool {
	v := p.read(name, strconv.FormatBool(def))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, v, "want true or false")
	}
	return b
}

func (p *parser) duration(name string, def time.Duration) time.Duration {
	v := p.read(name, def.String())
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.fail(name, v, "want a duration such as 500ms, 10m")
	}
	return d
}

// tls builds the TLS settings of a client from "<on>" (a boolean) and "<ca>" (optional PEM
// roots; empty: the system's), or nil when TLS is off.
func (p *parser) tls(on, ca string) *tls.Config {
	file := p.read(ca, "")
	if !p.boolean(on, false) {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if file != "" {
		pem, err := os.ReadFile(file)
		if err != nil {
			p.fail(ca, file, err.Error())
			return nil
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			p.fail(ca, file, "holds no PEM certificate")
			return nil
		}
	}
	return cfg
}

// level parses a log level: debug, info, warn or error.
func (p *parser) level(name string, def slog.Level) slog.Level {
	v := p.read(name, strings.ToLower(def.String()))
	if v == "" {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil || !slices.Contains([]string{"debug", "info", "warn", "error"}, strings.ToLower(v)) {
		p.fail(name, v, "want debug, info, warn or error")
	}
	return l
}

// limit parses "RATE/PERIOD:BURST", e.g. "5/1s:10"; "off" disables the policy.
func (p *parser) limit(name, def string) Limit {
	v := p.str(name, def)
	if v == "off" {
		return Limit{}
	}
	l, err := ParseLimit(v)
	if err != nil {
		p.fail(name, v, err.Error())
	}
	return l
}

// Limit is a rate limit as configured: Rate requests per Period, bursts of up to Burst; Rate 0
// is off. It converts to limits.Policy, which has the same fields.
type Limit struct {
	Rate   int
	Period time.Duration
	Burst  int
}

func (l Limit) String() string { return fmt.Sprintf("%d/%s burst %d", l.Rate, l.Period, l.Burst) }

// ParseLimit parses "RATE/PERIOD:BURST" such as "5/1s:10" (burst defaults to rate).
func ParseLimit(v string) (Limit, error) {
	bad := fmt.Errorf("want RATE/PERIOD:BURST such as 5/1s:10, or off")
	rateS, rest, ok := strings.Cut(v, "/")
	if !ok {
		return Limit{}, bad
	}
	periodS, burstS, hasBurst := strings.Cut(rest, ":")
	rate, err1 := strconv.Atoi(rateS)
	period, err2 := time.ParseDuration(periodS)
	burst := rate
	var err3 error
	if hasBurst {
		burst, err3 = strconv.Atoi(burstS)
	}
	if err1 != nil || err2 != nil || err3 != nil || rate < 1 || period < time.Millisecond || burst < 1 {
		return Limit{}, bad
	}
	return Limit{Rate: rate, Period: period, Burst: burst}, nil
}
