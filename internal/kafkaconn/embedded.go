package kafkaconn

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EmbeddedMechanism is the embedded broker's SASL mechanism unless KAFKA_SASL_MECHANISM names
// another.
const EmbeddedMechanism = "SCRAM-SHA-256"

// EmbeddedDir is the embedded broker's directory for the deployment listening on addr: private
// to this user (0700), named for the address, so a restarted api finds the events it kept and
// the reconciler finds the login the api uses.
func EmbeddedDir(addr string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "flashsale", "kafka-"+strings.ReplaceAll(addr, ":", "_"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("embedded broker data directory %s: %w", dir, err)
	}
	return dir, os.Chmod(dir, 0o700)
}

// EmbeddedLogin is the login of the embedded broker kept in dir. KAFKA_USERNAME and
// KAFKA_PASSWORD (set, as s carries them) win; unset, the deployment's credentials file in dir
// (0600) is read, and made with a random password by whichever binary comes first, so the api,
// the reconciler and `make run` share one login without anyone typing it.
func EmbeddedLogin(dir string, s Security) (Security, error) {
	if s.Mechanism == "" {
		s.Mechanism = EmbeddedMechanism
	}
	if s.Username != "" || s.Password != "" {
		return s, s.Check()
	}
	path := filepath.Join(dir, "credentials.json")
	stored, err := readLogin(path)
	if errors.Is(err, os.ErrNotExist) {
		stored, err = makeLogin(path)
	}
	if err != nil {
		return Security{}, fmt.Errorf("embedded broker credentials %s: %w", path, err)
	}
	s.Username, s.Password = stored.Username, stored.Password
	return s, s.Check()
}

type login struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

func readLogin(path string) (login, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return login{}, err
	}
	var l login
	if err := json.Unmarshal(b, &l); err != nil || l.Username == "" || l.Password == "" {
		return login{}, fmt.Errorf("unreadable (%v): delete it to have a new login made", err)
	}
	return l, nil
}

// makeLogin writes a new login to path unless another process got there first, in which
// case that one is the deployment's: the file appears whole (a link of a finished file) or
// not at all.
func makeLogin(path string) (login, error) {
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return login{}, err
	}
	l := login{Username: "flashsale", Password: hex.EncodeToString(secret)}
	b, _ := json.Marshal(l)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return login{}, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return login{}, err
	}
	if err := tmp.Close(); err != nil {
		return login{}, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
		return readLogin(path)
	} else if err != nil {
		return login{}, err
	}
	return l, nil
}
