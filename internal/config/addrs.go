package config

import (
	"fmt"
	"net"
	"strconv"
)

// checkAddrs refuses a host:port that cannot be one (redis:6379:1, a port out of range) at
// start, as a configuration error, instead of letting a client fail on it later.
func checkAddrs(c Config) error {
	check := func(name string, addrs ...string) error {
		for _, a := range addrs {
			host, port, err := net.SplitHostPort(a)
			n, perr := strconv.Atoi(port)
			if err != nil || perr != nil || n < 0 || n > 65535 || (host == "" && name == "FLASHSALE_REDIS_ADDRS") {
				return fmt.Errorf("config: %s: %q is not a host:port address", name, a)
			}
		}
		return nil
	}
	if err := check("FLASHSALE_REDIS_ADDRS", c.RedisAddrs...); err != nil {
		return err
	}
	if err := check("FLASHSALE_HTTP_ADDR", c.HTTPAddr); err != nil {
		return err
	}
	if c.OpsAddr != "" {
		if err := check("FLASHSALE_OPS_ADDR", c.OpsAddr); err != nil {
			return err
		}
	}
	if len(c.KafkaBrokers) == 0 {
		return check("FLASHSALE_EMBEDDED_KAFKA_ADDR", c.EmbeddedKafkaAddr)
	}
	return check("KAFKA_BROKERS", c.KafkaBrokers...)
}
