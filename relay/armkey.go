package relay

// ArmKey is what an Arm does with a job's cron key, for engines: held is the
// key the job's row holds (zero: none, or no row), req the arm. It returns
// the key the armed row keeps and whether that changed the row's delivery
// (ArmResult.Rekeyed, when the row existed):
//   - a mediated arm (req.Direct zero) drops a held key;
//   - a direct arm keeps a held key minted at or after req.KeepKeyFrom;
//   - otherwise it stores req.Direct.
func ArmKey(held DirectKey, req ArmRequest) (DirectKey, bool) {
	if !req.Direct.IsDirect() {
		return DirectKey{}, held.IsDirect()
	}
	if held.IsDirect() && !held.MintedAt.Before(req.KeepKeyFrom) {
		return held, false
	}
	return req.Direct, true
}
