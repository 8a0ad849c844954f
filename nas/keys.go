package nas

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/atomicfile"
	"github.com/chronoscron/chronos/internal/secretfile"
)

// ActiveKeyFile is the file in the signing keys dir that names the signing kid.
const ActiveKeyFile = "active"

// SigningKey is one private signing key with its kid and algorithm.
type SigningKey struct {
	KID     string
	Alg     string
	Private crypto.Signer
	// ModTime is the key file's modification time (zero for keys not read
	// from a file); without an `active` file the oldest key signs.
	ModTime time.Time
}

// GenerateKey makes a new key for alg (EdDSA, ES256 or RS256).
func GenerateKey(alg string) (*SigningKey, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case AlgEdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	case AlgES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case AlgRS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		return nil, fmt.Errorf("generate key: unknown algorithm %q (want EdDSA, ES256 or RS256)", alg)
	}
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return newSigningKey(priv)
}

func newSigningKey(priv crypto.Signer) (*SigningKey, error) {
	alg, err := algFor(priv)
	if err != nil {
		return nil, err
	}
	kid, err := KeyID(priv.Public())
	if err != nil {
		return nil, err
	}
	return &SigningKey{KID: kid, Alg: alg, Private: priv}, nil
}

func algFor(priv crypto.Signer) (string, error) {
	switch k := priv.(type) {
	case ed25519.PrivateKey:
		return AlgEdDSA, nil
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", errors.New("key: only the P-256 curve is supported for ECDSA")
		}
		return AlgES256, nil
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return "", fmt.Errorf("key: RSA key is %d bits, want at least 2048", k.N.BitLen())
		}
		return AlgRS256, nil
	default:
		return "", fmt.Errorf("key: unsupported key type %T", priv)
	}
}

// KeyID derives a kid from a public key: lowercase hex of the first 16 bytes
// of SHA-256 over its PKIX DER encoding. Hex keeps a kid usable as a file name
// and as a command-line argument (a base64url kid may start with "-").
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:16]), nil
}

// MarshalPEM encodes the private key as a PKCS #8 PEM block.
func (k *SigningKey) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKeyPEM reads a PKCS #8 (or SEC 1 EC / PKCS #1 RSA) PEM private key;
// the algorithm follows from the key type and the kid from the public key.
func ParseKeyPEM(data []byte) (*SigningKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("parse key: no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("parse key: unexpected PEM block %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parse key: %T cannot sign", key)
	}
	return newSigningKey(signer)
}

// JWK returns the public key as a JWK (kty, crv, x, y, n, e from jwkset's
// encoding; kid, alg and use "sig" from the key).
func (k *SigningKey) JWK() (contract.JWK, error) {
	j, err := jwkset.NewJWKFromKey(k.Private.Public(), jwkset.JWKOptions{
		Metadata: jwkset.JWKMetadataOptions{KID: k.KID, ALG: jwkset.ALG(k.Alg), USE: jwkset.UseSig},
	})
	if err != nil {
		return contract.JWK{}, fmt.Errorf("jwk of key %s: %w", k.KID, err)
	}
	m := j.Marshal()
	return contract.JWK{
		Kty: string(m.KTY), Kid: m.KID, Use: string(m.USE), Alg: string(m.ALG),
		Crv: string(m.CRV), X: m.X, Y: m.Y, N: m.N, E: m.E,
	}, nil
}

// SigningMethod returns the jwt signing method of the key.
func (k *SigningKey) SigningMethod() jwt.SigningMethod {
	switch k.Alg {
	case AlgES256:
		return jwt.SigningMethodES256
	case AlgRS256:
		return jwt.SigningMethodRS256
	default:
		return jwt.SigningMethodEdDSA
	}
}

// KeySet is one immutable view of the signing keys: the key that signs and
// every key published in the JWKS (the signing key, the next one, and
// retiring ones still in the directory).
type KeySet struct {
	Active    *SigningKey
	Published []*SigningKey
	// Exposed are the key files LoadKeyDir read that their group or others
	// may read; NAS logs a warning for each.
	Exposed []secretfile.Exposure
	jwks    []byte
}

// autoAlgOrder is the order in which an unset signing_alg picks the signing
// key of a keys dir without an `active` file: the default first, then the
// former default, so a dir made for either keeps signing as it did.
var autoAlgOrder = []string{AlgES256, AlgEdDSA, AlgRS256}

// NewKeySet builds a key set from keys; activeKID names the signing key ("":
// the oldest key of alg, by ModTime then kid). The active key must use alg.
// An empty alg lets the keys decide: the active key whatever its algorithm,
// or without one the oldest ES256 key, else the oldest EdDSA key, else the
// oldest RS256 key.
func NewKeySet(keys []*SigningKey, activeKID, alg string) (*KeySet, error) {
	if len(keys) == 0 {
		return nil, errors.New("key set: no keys (run `chronos keys generate`)")
	}
	sorted := append([]*SigningKey(nil), keys...)
	sort.Slice(sorted, func(i, j int) bool {
		if !sorted[i].ModTime.Equal(sorted[j].ModTime) {
			return sorted[i].ModTime.Before(sorted[j].ModTime)
		}
		return sorted[i].KID < sorted[j].KID
	})
	oldest := func(alg string) *SigningKey {
		for _, k := range sorted {
			if k.Alg == alg {
				return k
			}
		}
		return nil
	}
	var active *SigningKey
	switch {
	case activeKID != "":
		for _, k := range sorted {
			if k.KID == activeKID {
				active = k
			}
		}
	case alg != "":
		active = oldest(alg)
	default:
		for _, a := range autoAlgOrder {
			if active = oldest(a); active != nil {
				break
			}
		}
	}
	switch {
	case active == nil && activeKID != "":
		return nil, fmt.Errorf("key set: active kid %q is not among the keys", activeKID)
	case active == nil:
		return nil, fmt.Errorf("key set: no %s key (signing_alg is %s)", alg, alg)
	case alg != "" && active.Alg != alg:
		return nil, fmt.Errorf("key set: active key %s is %s but signing_alg is %s", active.KID, active.Alg, alg)
	}
	set := &KeySet{Active: active, Published: sorted}
	jwks := contract.JWKS{Keys: make([]contract.JWK, 0, len(sorted))}
	for _, k := range sorted {
		j, err := k.JWK()
		if err != nil {
			return nil, fmt.Errorf("key set: %w", err)
		}
		jwks.Keys = append(jwks.Keys, j)
	}
	b, err := json.Marshal(jwks)
	if err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	set.jwks = b
	return set, nil
}

// JWKS returns the JSON of the published key set.
func (s *KeySet) JWKS() []byte { return s.jwks }

// LoadKeyDir reads every *.pem key of dir and the optional `active` file;
// alg is as for NewKeySet ("" lets the keys decide). The dir, the key files
// and `active` must not be writable by group or others (see CheckKeyPath);
// a key file that group or others may read is loaded and listed in the
// set's Exposed.
func LoadKeyDir(dir, alg string) (*KeySet, error) {
	if err := CheckKeyPath(dir); err != nil {
		return nil, fmt.Errorf("load keys: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load keys: %w", err)
	}
	var keys []*SigningKey
	var exposed []secretfile.Exposure
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".pem") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := CheckKeyPath(p); err != nil {
			return nil, fmt.Errorf("load keys: %w", err)
		}
		data, exp, err := secretfile.Read(p)
		if err != nil {
			return nil, fmt.Errorf("load keys: %w", err)
		}
		if exp != nil {
			exposed = append(exposed, *exp)
		}
		k, err := ParseKeyPEM(data)
		if err != nil {
			return nil, fmt.Errorf("load keys: %s: %w", e.Name(), err)
		}
		if info, err := os.Stat(p); err == nil {
			k.ModTime = info.ModTime()
		}
		keys = append(keys, k)
	}
	active := ""
	activePath := filepath.Join(dir, ActiveKeyFile)
	if b, err := os.ReadFile(activePath); err == nil {
		if err := CheckKeyPath(activePath); err != nil {
			return nil, fmt.Errorf("load keys: %w", err)
		}
		active = strings.TrimSpace(string(b))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load keys: %w", err)
	}
	set, err := NewKeySet(keys, active, alg)
	if err != nil {
		return nil, fmt.Errorf("load keys from %s: %w", dir, err)
	}
	set.Exposed = exposed
	return set, nil
}

// WriteKeyFile writes k's private key to dir/<kid>.pem with mode 0600,
// creating dir with mode 0700 when it is missing. It refuses a dir that group
// or others may write (see CheckKeyPath) and an existing key file. The file
// and the directory entry are fsynced before it returns.
func WriteKeyFile(dir string, k *SigningKey) error {
	data, err := k.MarshalPEM()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, secretfile.DirPerm); err != nil {
		return err
	}
	if err := CheckKeyPath(dir); err != nil {
		return err
	}
	return atomicfile.Create(filepath.Join(dir, k.KID+".pem"), data, secretfile.Perm)
}

// ActivateKey names kid in dir's active file, making it the signing key at
// NAS's next key check. The file is replaced atomically (temporary file,
// fsync, rename, directory fsync): NAS never reads a half-written kid, and a
// crash leaves the previous one. The file is written with mode 0600, also
// over an active file of another mode.
func ActivateKey(dir, kid string) error {
	return atomicfile.Replace(filepath.Join(dir, ActiveKeyFile), []byte(kid+"\n"), secretfile.Perm)
}

// CheckKeyPath refuses a signing keys dir or key file (symbolic links
// followed) that group or others may write: whoever can write there can make
// NAS sign fire tokens with a key of their choosing, or take signing away.
func CheckKeyPath(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		what := "key file"
		if info.IsDir() {
			what = "keys dir"
		}
		return fmt.Errorf("%s %s is writable by group or others (mode %04o); run chmod go-w %s", what, path, perm, path)
	}
	return nil
}

// dirStamp summarises a directory and its entries (names, sizes, modes,
// mtimes) so a change, a chmod included, can be noticed without reading
// every file.
func dirStamp(dir string) (string, error) {
	di, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%o;", di.Mode())
	for _, e := range entries {
		info, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%o:%d;", e.Name(), info.Size(), info.Mode(), info.ModTime().UnixNano())
	}
	return b.String(), nil
}

// KeyRing holds the current KeySet and swaps it atomically on reload. It is
// safe for concurrent use.
type KeyRing struct {
	dir, alg string
	set      atomic.Pointer[KeySet]
	stamp    atomic.Value // string
}

// NewKeyRing returns a ring serving a fixed set (no directory).
func NewKeyRing(set *KeySet) *KeyRing {
	r := &KeyRing{}
	r.set.Store(set)
	return r
}

// OpenKeyRing loads dir and returns a ring that Reload re-reads. An empty
// alg takes the algorithm of the dir's signing key now (see NewKeySet) and
// keeps it: a later reload whose signing key has another algorithm is
// refused, as with an explicit alg. Alg reports it.
func OpenKeyRing(dir, alg string) (*KeyRing, error) {
	r := &KeyRing{dir: dir, alg: alg}
	if _, err := r.Reload(); err != nil {
		return nil, err
	}
	if r.alg == "" {
		r.alg = r.Current().Active.Alg
	}
	return r, nil
}

// Alg returns the algorithm the ring signs with.
func (r *KeyRing) Alg() string {
	if r.alg != "" {
		return r.alg
	}
	return r.Current().Active.Alg
}

// Current returns the current key set.
func (r *KeyRing) Current() *KeySet { return r.set.Load() }

// Reload re-reads the directory if it changed; it reports whether the set
// changed. On error the previous set stays in use.
func (r *KeyRing) Reload() (bool, error) {
	if r.dir == "" {
		return false, nil
	}
	stamp, err := dirStamp(r.dir)
	if err != nil {
		return false, fmt.Errorf("reload keys: %w", err)
	}
	if old, _ := r.stamp.Load().(string); old == stamp && r.set.Load() != nil {
		return false, nil
	}
	set, err := LoadKeyDir(r.dir, r.alg)
	if err != nil {
		return false, err
	}
	r.set.Store(set)
	r.stamp.Store(stamp)
	return true, nil
}

// NewEphemeralKeyRing generates keys of alg in memory: for development and
// in-process demos, where tokens need not outlive the process. Like a keys
// dir in rotation, it publishes two keys: the current one, which signs, and
// a next one, which does not.
func NewEphemeralKeyRing(alg string) (*KeyRing, error) {
	current, err := GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	next, err := GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	set, err := NewKeySet([]*SigningKey{current, next}, current.KID, alg)
	if err != nil {
		return nil, err
	}
	return NewKeyRing(set), nil
}
