package relaytest

import (
	"testing"

	"github.com/chronoscron/chronos/relay"
)

// Factory makes the engines the suite tests.
type Factory struct {
	// New returns a new, empty engine on the real clock. Required. The
	// factory owns the engine's lifetime (register Close with t.Cleanup).
	New func(t *testing.T) relay.Engine
	// NewWithClock, when set, returns a new, empty engine that reads time
	// from clock alone; the fake-clock section runs only then.
	NewWithClock func(t *testing.T, clock *Clock) relay.Engine
	// Peer, when set, returns another engine on the same store as e, as a
	// second process would open it (its own connections and wake-ups); the
	// tests of what one process learns from another run only then.
	Peer func(t *testing.T, e relay.Engine) relay.Engine
}

// RunEngineSuite runs the conformance suite against the engines of f. Every
// test runs in parallel on its own engine.
func RunEngineSuite(t *testing.T, f Factory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("relaytest: Factory.New is required")
	}
	runEach(t, f, realTests)
	runEach(t, f, lastFireTests)
	runEach(t, f, flowTests)
	runEach(t, f, directTests)
	if f.NewWithClock == nil {
		return
	}
	for _, tc := range flowClockTests {
		t.Run("clock/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewClock(clockEpoch)
			tc.run(t, f.NewWithClock(t, c), c)
		})
	}
	for _, tc := range clockTests {
		t.Run("clock/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewClock(clockEpoch)
			tc.run(t, f.NewWithClock(t, c), c)
		})
	}
}

// engineTest is one test of the suites that runs on one engine.
type engineTest struct {
	name string
	run  func(t *testing.T, e relay.Engine)
}

// runEach runs tests as subtests of t, in parallel, each on a new engine of
// f.
func runEach(t *testing.T, f Factory, tests []engineTest) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, f.New(t))
		})
	}
}

// realTests run on the real clock.
var realTests = []engineTest{
	{"ArmUpsert", testArmUpsert},
	{"ArmReplaceLosesLease", testArmReplaceLosesLease},
	{"ArmSameWhileLeased", testArmSameWhileLeased},
	{"ArmSameMovesCallback", testArmSameMovesCallback},
	{"FireAtSpelling", testFireAtSpelling},
	{"Quota", testQuota},
	{"Cancel", testCancel},
	{"Get", testGet},
	{"ListPaging", testListPaging},
	{"InvalidCursor", testInvalidCursor},
	{"ClaimNotBeforeFireAt", testClaimNotBeforeFireAt},
	{"ClaimOnce", testClaimOnce},
	{"ClaimCarriesDelivery", testClaimCarriesDelivery},
	{"ClaimBatch", testClaimBatch},
	{"Fencing", testFencing},
	{"Extend", testExtend},
	{"AckRemoves", testAckRemoves},
	{"NackRedue", testNackRedue},
	{"KillDeadLetters", testKillDeadLetters},
	{"FailedFires", testFailedFires},
	{"ListDead", testListDead},
	{"Replay", testReplay},
	{"ReplayAgent", testReplayAgent},
	{"ReplayDropsRearmed", testReplayDropsRearmed},
	{"ReplayKeepsFencing", testReplayKeepsFencing},
	{"Reap", testReap},
	{"NextDue", testNextDue},
	{"WakeOnArm", testWakeOnArm},
	{"WakeOnNack", testWakeOnNack},
	{"WakeOnReplay", testWakeOnReplay},
	{"WakeOnReap", testWakeOnReap},
	{"InstanceStopped", testInstanceStopped},
	{"FirstDelivery", testFirstDelivery},
	{"CancelAgent", testCancelAgent},
	{"Stats", testStats},
	{"ConcurrentClaims", testConcurrentClaims},
}
