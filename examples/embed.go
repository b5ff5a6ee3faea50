// Package examples ships the README walkthrough's inputs inside the binary,
// so that a user with only the release (archive or deb) has them:
// `screengraph-agent examples DIR` writes them with the demo APKs.
package examples

import _ "embed"

// RunJSON is run.json: a setup run of the demo app on emulator-5554, its
// apkStorageObjectReference a placeholder (file:///ABSOLUTE/PATH/TO/demo-v2.apk).
//
//go:embed run.json
var RunJSON []byte

// PolicyV2 is policy-v2.yaml: a second policy version (longer timeouts, more
// retries) that `serve --policy` adds.
//
//go:embed policy-v2.yaml
var PolicyV2 []byte

// APKPlaceholder is the apkStorageObjectReference RunJSON carries.
const APKPlaceholder = "file:///ABSOLUTE/PATH/TO/demo-v2.apk"
