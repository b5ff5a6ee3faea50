package e2e

import "github.com/screengraph/screengraph-agent/cmd/internal/chaintest"

// The chain helpers this package shares with cmd/screengraph-agent's tests
// (cmd/internal/chaintest), under the names its tests use.
const (
	appPkg   = chaintest.AppPkg
	agentPkg = chaintest.AgentPkg
)

type nodePayload = chaintest.NodePayload

var (
	launchDefault       = chaintest.LaunchDefault
	fixtureAPK          = chaintest.FixtureAPK
	signerDigest        = chaintest.SignerDigest
	independentChecksum = chaintest.IndependentChecksum
	decodeNode          = chaintest.DecodeNode
	finishedOf          = chaintest.FinishedOf
	lastOutput          = chaintest.LastOutput
	deltaLines          = chaintest.DeltaLines
	checkAgentError     = chaintest.CheckRunRefused
	noRunStored         = chaintest.NoRunStored
	// The daemon tests run the real binary (SIGKILL needs a process of
	// its own), built once per test process.
	buildAgent = chaintest.BuildAgent
)
