// Package kafkaconn holds how flashsale's Kafka clients (the relay's writer, the consumer, the
// lag and settle probes) authenticate and encrypt: SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
// and TLS, through kafka-go's own sasl packages. The zero Security is plaintext, no login.
package kafkaconn

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Security is the clients' login and encryption (KAFKA_SASL_MECHANISM, KAFKA_USERNAME,
// KAFKA_PASSWORD; TLS from KAFKA_TLS and KAFKA_CA_FILE, built by config).
type Security struct {
	Mechanism          string // "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Username, Password string
	TLS                *tls.Config // nil: plaintext
}

// Check reports a configuration the clients could not use.
func (s Security) Check() error {
	_, err := s.mechanism()
	if err == nil && s.Mechanism != "" && (s.Username == "" || s.Password == "") {
		err = fmt.Errorf("KAFKA_SASL_MECHANISM %s needs KAFKA_USERNAME and KAFKA_PASSWORD", s.Mechanism)
	}
	return err
}

func (s Security) mechanism() (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case "PLAIN":
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	case "SCRAM-SHA-256":
		return scram.Mechanism(scram.SHA256, s.Username, s.Password)
	case "SCRAM-SHA-512":
		return scram.Mechanism(scram.SHA512, s.Username, s.Password)
	}
	return nil, fmt.Errorf("KAFKA_SASL_MECHANISM %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.Mechanism)
}

// Transport is a kafka-go transport (for writers and clients) with the login and TLS.
func (s Security) Transport() (*kafka.Transport, error) {
	mech, err := s.mechanism()
	if err != nil {
		return nil, err
	}
	return &kafka.Transport{SASL: mech, TLS: s.TLS}, nil
}

// Dialer is a kafka-go dialer (for readers) with the login and TLS.
func (s Security) Dialer() (*kafka.Dialer, error) {
	mech, err := s.mechanism()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, SASLMechanism: mech, TLS: s.TLS}, nil
}
