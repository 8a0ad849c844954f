package localapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the admin token's file in the home when the config names
// none.
const TokenFile = "ui-token"

// TokenPath returns the admin token's file: tokenFile, else
// <home>/ui-token.
func TokenPath(home, tokenFile string) string {
	if strings.TrimSpace(tokenFile) != "" {
		return tokenFile
	}
	return filepath.Join(home, TokenFile)
}

// ReadToken reads the admin token from path (trimmed); an empty file is an
// error.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("localapi: admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("localapi: admin token file %s is empty", path)
	}
	return tok, nil
}

// EnsureToken returns the admin token: read from tokenFile when the config
// names one (it must exist), else from <home>/ui-token, which is created
// (mode 0600, 32 random bytes in hex) when missing.
func EnsureToken(home, tokenFile string) (string, error) {
	if strings.TrimSpace(tokenFile) != "" {
		return ReadToken(tokenFile)
	}
	path := TokenPath(home, "")
	tok, err := ReadToken(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("localapi: admin token: %w", err)
	}
	tok = hex.EncodeToString(b[:])
	// Written aside, then linked into place: a concurrent start on this
	// home never reads a half-written file, and only one token wins.
	tmp, err := os.CreateTemp(home, ".ui-token-*")
	if err != nil {
		return "", fmt.Errorf("localapi: admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(tok + "\n")
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", fmt.Errorf("localapi: admin token: %w", werr)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return ReadToken(path)
	} else if err != nil {
		return "", fmt.Errorf("localapi: admin token: %w", err)
	}
	return tok, nil
}
