// Package nodes holds the setup chain's nodes, EnsureDevice -> ProvisionApp ->
// LaunchOrAttach -> WaitIdle, with their Input/Output structs (the spec's JSON
// names) and JSON Schemas, the run request (NewSetupRun, SetupPreparer) and
// the setup graph. Pure and DB-blind: a node reaches the device, Appium and
// the emulator only through the Ports passed in, and returns a result the
// engine persists (tools/repocheck/layers_test.go guards the imports).
package nodes
