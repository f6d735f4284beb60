package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/privfile"
)

// The embedded NATS server of serve --nats-listen on loopback without
// --token is not open to every user and process of the machine: it
// requires a token of its own, generated once and kept in the data
// directory in a file only its owner can read. The fleet commands of that
// user on that machine (worker, submit, run, runs, logs, serve --nats)
// send it when their URL is the server's on loopback and names no
// credentials; anyone else is refused.

// natsTokenFile is the file's content: the address the server listens on
// (a client sends the token to that port on loopback only) and the token.
type natsTokenFile struct {
	Addr  string `json:"addr"`
	Token string `json:"token"`
}

// natsTokenPath is where the data directory keeps the token.
func natsTokenPath(dataDir string) string { return filepath.Join(dataDir, "nats", "token.json") }

// readOrNewNATSToken returns the token of the file at path, or a new one
// when there is none, or the file could have been read by others (its
// mode allows more than its owner).
func readOrNewNATSToken(path string) (string, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 == 0 {
		if tf, err := readNATSToken(path); err == nil && tf.Token != "" {
			return tf.Token, nil
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return rand.Text(), nil
}

func readNATSToken(path string) (natsTokenFile, error) {
	var tf natsTokenFile
	b, err := os.ReadFile(path)
	if err != nil {
		return tf, err
	}
	if err := json.Unmarshal(b, &tf); err != nil {
		return tf, fmt.Errorf("%s: %w", path, err)
	}
	return tf, nil
}

// writeNATSToken writes the file, readable by its owner only, in one
// step (a client reading it meanwhile reads the old or the new one).
func writeNATSToken(path, addr, token string) error {
	b, err := json.Marshal(natsTokenFile{Addr: addr, Token: token})
	if err != nil {
		return err
	}
	return privfile.Write(path, append(b, '\n'))
}

// localNATSToken is the token a client sends to the NATS server at
// natsURL: the file's at path when natsURL is one server on loopback, with
// no credentials of its own, at the port the file names; nil otherwise
// (never a token to another server). The file is read at every
// connection attempt: a worker started before the gateway finds it.
func localNATSToken(natsURL, path string) func() string {
	if strings.Contains(natsURL, ",") {
		return nil
	}
	s := strings.TrimSpace(natsURL)
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.User != nil || u.Hostname() == "" {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "4222" // NATS's
	}
	if !gateway.IsLoopback(net.JoinHostPort(u.Hostname(), port)) {
		return nil
	}
	return func() string {
		tf, err := readNATSToken(path)
		if err != nil {
			return ""
		}
		if _, p, err := net.SplitHostPort(tf.Addr); err != nil || p != port {
			return ""
		}
		return tf.Token
	}
}
