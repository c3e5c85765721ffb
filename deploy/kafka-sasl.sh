#!/bin/sh
# Runs a Kafka command-line tool as a SASL PLAIN client of docker-compose.yml's broker (its health
# check and kafka-init). The credentials come from SASL_USERNAME and SASL_PASSWORD: the
# apache/kafka image turns every KAFKA_* variable into a broker setting.
#   sh kafka-sasl.sh /opt/kafka/bin/kafka-topics.sh --bootstrap-server kafka:9092 --list
set -eu
: "${SASL_USERNAME:?}" "${SASL_PASSWORD:?}"
props=/tmp/flashsale-client.properties
umask 077
cat >"$props" <<PROPS
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$SASL_USERNAME" password="$SASL_PASSWORD";
PROPS
exec "$@" --command-config "$props"
