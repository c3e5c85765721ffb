// Package kafkabroker runs an embedded Kafka-protocol broker (franz-go's kfake) for the
// one-command local run and for tests. Real deployments set KAFKA_BROKERS and never start it;
// producers and consumers speak the ordinary Kafka protocol to either.
package kafkabroker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/flashsale/flashsale/internal/kafkaconn"
)

// ErrStopped is returned by Restart after Close.
var ErrStopped = errors.New("kafkabroker: closed")

// Options describe the broker.
type Options struct {
	// Addr is host:port to listen on, a loopback host; port 0 picks a free port (kept
	// across Restart).
	Addr string
	// Login, when it names a mechanism, is the one user the broker accepts (SASL PLAIN,
	// SCRAM-SHA-256 or SCRAM-SHA-512): a connection that has not logged in as it can neither
	// produce nor fetch. The zero Login asks nobody to log in (tests only).
	Login kafkaconn.Security
	// Topic is created with Partitions partitions when the broker starts empty.
	Topic      string
	Partitions int
	// DataDir, when set, persists the log and committed group offsets, so a restarted broker
	// (or a restarted api) keeps every event not yet consumed. Empty: in memory only.
	DataDir string
}

// Broker is one embedded single-node cluster.
type Broker struct {
	opt  Options
	mu   sync.Mutex
	c    *kfake.Cluster
	addr string
	dead bool
}

// Start listens on opt.Addr and creates the topic.
func Start(opt Options) (*Broker, error) {
	if opt.Partitions < 1 {
		opt.Partitions = 1
	}
	if opt.Topic == "" {
		return nil, fmt.Errorf("kafkabroker: a topic is needed")
	}
	b := &Broker{opt: opt}
	if err := b.start(opt.Addr); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Broker) start(addr string) error {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("kafkabroker: address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("kafkabroker: address %q: bad port", addr)
	}
	// No TLS: only processes of this host may reach it, and they log in.
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("kafkabroker: address %q: the embedded broker listens on a loopback address only", addr)
	}
	opts := []kfake.Opt{
		kfake.Ports(port),
		kfake.SeedTopics(int32(b.opt.Partitions), b.opt.Topic),
		// Listen only on the configured host; kfake's default listens on every interface.
		kfake.ListenFn(func(network, a string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(a)
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
	}
	if b.opt.Login.Mechanism != "" {
		if err := b.opt.Login.Check(); err != nil {
			return fmt.Errorf("kafkabroker: %w", err)
		}
		opts = append(opts, kfake.EnableSASL(),
			kfake.Superuser(b.opt.Login.Mechanism, b.opt.Login.Username, b.opt.Login.Password))
	}
	if b.opt.DataDir != "" {
		// The users are configuration, not state: kfake would load the ones it saved last
		// time over Login, and a changed password would lock everyone out.
		if err := os.Remove(filepath.Join(b.opt.DataDir, "sasl.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("kafkabroker: %w", err)
		}
		opts = append(opts, kfake.DataDir(b.opt.DataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("kafkabroker: start on %s: %w", addr, err)
	}
	b.c = c
	b.addr = c.ListenAddrs()[0]
	return nil
}

// Addr is the broker's host:port (the bootstrap address for clients).
func (b *Broker) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// Stop shuts the broker down (persisting its state when DataDir is set); Restart brings it
// back on the same address. Clients see a broker outage in between.
func (b *Broker) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

// Restart starts a stopped broker again on the same address.
func (b *Broker) Restart() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead {
		return ErrStopped
	}
	if b.c != nil {
		return nil
	}
	return b.start(b.addr)
}

// Close stops the broker for good.
func (b *Broker) Close() {
	b.Stop()
	b.mu.Lock()
	b.dead = true
	b.mu.Unlock()
}
