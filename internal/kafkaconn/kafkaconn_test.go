package kafkaconn

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A broker that requires SASL (kfake, over TCP) takes a write and a group read through the
// transport and dialer Security builds, for each mechanism; a wrong password is refused.
func TestSASLAgainstABrokerThatRequiresIt(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
				kfake.Superuser(mech, "shop", "s3cret-pass"), kfake.SeedTopics(1, "t"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			brokers := c.ListenAddrs()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			good := Security{Mechanism: mech, Username: "shop", Password: "s3cret-pass"}
			if err := good.Check(); err != nil {
				t.Fatal(err)
			}
			tr, err := good.Transport()
			if err != nil {
				t.Fatal(err)
			}
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "t", Transport: tr, BatchTimeout: time.Millisecond}
			defer w.Close()
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("k"), Value: []byte("v")}); err != nil {
				t.Fatalf("write with %s: %v", mech, err)
			}
			d, err := good.Dialer()
			if err != nil {
				t.Fatal(err)
			}
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "t", GroupID: "g", Dialer: d,
				StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
			defer r.Close()
			m, err := r.FetchMessage(ctx)
			if err != nil || string(m.Value) != "v" {
				t.Fatalf("read with %s: %q %v", mech, m.Value, err)
			}

			bad := Security{Mechanism: mech, Username: "shop", Password: "wrong"}
			btr, _ := bad.Transport()
			bw := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: "t", Transport: btr, MaxAttempts: 1}
			defer bw.Close()
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			defer wcancel()
			if err := bw.WriteMessages(wctx, kafka.Message{Value: []byte("x")}); err == nil {
				t.Fatal("a wrong password wrote")
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, bad := range []Security{
		{Mechanism: "GSSAPI", Username: "u", Password: "p"},
		{Mechanism: "PLAIN", Username: "u"},
	} {
		if bad.Check() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (Security{}).Check(); err != nil {
		t.Errorf("plaintext refused: %v", err)
	}
}
