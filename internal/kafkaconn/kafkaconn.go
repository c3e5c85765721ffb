// Package kafkaconn holds how flashsale's Kafka clients (the relay's writer, the consumer, the
// lag and settle probes) authenticate and encrypt: SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
// and TLS, through kafka-go's own sasl packages. The zero Security is plaintext, no login.
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// Security is the clients' login and encryption (KAFKA_SASL_MECHANISM, KAFKA_USERNAME,
// KAFKA_PASSWORD, KAFKA_TLS, KAFKA_CA_FILE).
type Security struct {
	Mechanism          string // "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Username, Password string
	TLS                bool
	CAFile             string // PEM roots for TLS; empty: the system's
}

// Check reports a configuration the clients could not use.
func (s Security) Check() error {
	_, err := s.mechanism()
	if err == nil && s.Mechanism != "" && (s.Username == "" || s.Password == "") {
		err = fmt.Errorf("KAFKA_SASL_MECHANISM %s needs KAFKA_USERNAME and KAFKA_PASSWORD", s.Mechanism)
	}
	if err == nil {
		_, err = s.tlsConfig()
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

func (s Security) tlsConfig() (*tls.Config, error) {
	if !s.TLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.CAFile != "" {
		pem, err := os.ReadFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("KAFKA_CA_FILE: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("KAFKA_CA_FILE %s holds no PEM certificate", s.CAFile)
		}
	}
	return cfg, nil
}

// Transport is a kafka-go transport (for writers and clients) with the login and TLS.
func (s Security) Transport() (*kafka.Transport, error) {
	mech, err := s.mechanism()
	if err != nil {
		return nil, err
	}
	t, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	return &kafka.Transport{SASL: mech, TLS: t}, nil
}

// Dialer is a kafka-go dialer (for readers) with the login and TLS.
func (s Security) Dialer() (*kafka.Dialer, error) {
	mech, err := s.mechanism()
	if err != nil {
		return nil, err
	}
	t, err := s.tlsConfig()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, SASLMechanism: mech, TLS: t}, nil
}
