package nas

// EffectiveYAML is what `chronos nas --print-config` prints: RedactedYAML,
// with an unset signing_alg shown as the one the signing keys dir decides,
// when the dir can be read from here.
func (c Config) EffectiveYAML() ([]byte, error) {
	if c.SigningAlg == "" && c.SigningKeysDir != "" {
		if set, err := LoadKeyDir(c.SigningKeysDir, ""); err == nil {
			c.SigningAlg = set.Active.Alg
		}
	}
	return c.RedactedYAML()
}
