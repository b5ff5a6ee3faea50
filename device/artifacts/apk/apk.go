// Package apk reads what the daemon needs to know about an APK file: its
// manifest identity (package id, versionCode, versionName, testOnly, launcher
// activity) and the SHA-256 digests of its signer certificates, verified the
// way the package manager of a given API level verifies them.
//
// It holds the value types of the artifact port as well (Artifact, Info), so
// that nodes can consume the port without importing the network code of
// package artifacts.
package apk

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/avast/apkverifier"
	"github.com/avast/apkverifier/apilevel"
	"github.com/shogo82148/androidbinary/apk"

	"github.com/screengraph/screengraph-agent/agent"
)

// Codes that refine artifact_unavailable when the bytes are not a usable APK.
const (
	// CodeNotAPK: not a zip, or no readable AndroidManifest.xml / package id.
	CodeNotAPK = "APK_INVALID"
	// CodeBadSignature: unsigned, or a signature that does not verify for the
	// requested API level (the package manager would refuse it with
	// INSTALL_PARSE_FAILED_NO_CERTIFICATES).
	CodeBadSignature = "APK_SIGNATURE_INVALID"
)

// Artifact is an APK fetched to local disk.
type Artifact struct {
	// Ref is the reference it was fetched from (file://, https://, s3://).
	Ref string `json:"ref"`
	// Path is the cached file, <cache>/sha256/<SHA256>.apk; never modified.
	Path string `json:"path"`
	// SHA256 is the lowercase hex digest of the file's bytes.
	SHA256 string `json:"sha256"`
	// Size in bytes.
	Size int64 `json:"size"`
	// CacheHit is true when nothing was downloaded.
	CacheHit bool `json:"cacheHit"`
}

// Info is the identity of an APK.
type Info struct {
	Package     string `json:"packageId"`
	VersionCode int64  `json:"versionCode"`
	VersionName string `json:"versionName"`
	MinSDK      int    `json:"minSdk"`
	TargetSDK   int    `json:"targetSdk"`
	// TestOnly mirrors android:testOnly (pm install needs -t).
	TestOnly bool `json:"testOnly"`
	// LauncherActivity is the fully qualified MAIN/LAUNCHER activity, "" if none.
	LauncherActivity string `json:"launcherActivity,omitempty"`
	// SigningScheme is the scheme whose signers are reported: 1 (JAR), 2, 3, 31 (v3.1).
	SigningScheme int `json:"signingScheme"`
	// SignerSHA256 are the lowercase hex SHA-256 digests of the signer
	// certificates (DER) that apply at the API level asked for: the value
	// `apksigner verify --print-certs` prints as "Signer #1 certificate SHA-256 digest".
	SignerSHA256 []string `json:"signerSha256"`
}

// Inspect reads the manifest of the APK at path and verifies its signature.
//
// apiLevel is the device's API level (ro.build.version.sdk): the signature must
// verify on it, and the signer reported is the one that applies there. With a
// v3 key rotation (proof-of-rotation lineage) that is the rotated signer on
// API >= 28 and the lineage's original signer below (pre-P devices read the
// v1/v2 signature, which apksigner makes with the oldest key; checked against
// `apksigner verify --max-sdk-version 27`). apiLevel <= 0 verifies over the APK's
// whole range [minSdk, ∞) like `apksigner verify` does.
//
// Errors are *agent.Error artifact_unavailable, not retryable: Code APK_INVALID
// (not a zip / no manifest / no package id), APK_ENTRY_TOO_LARGE (a manifest or
// resource table over its cap, checked before parsing) or APK_SIGNATURE_INVALID (unsigned,
// tampered, or not valid at apiLevel). A readable but differently signed APK is
// not an error here: comparing digests is the caller's business.
func Inspect(path string, apiLevel int) (Info, error) {
	var info Info
	if err := checkFile(path); err != nil {
		return info, err
	}
	a, err := apk.OpenFile(path)
	if err != nil {
		return info, invalid(CodeNotAPK, err, "%s is not a readable APK", path)
	}
	defer a.Close()
	m := a.Manifest()
	info.Package, _ = m.Package.String()
	if info.Package == "" {
		return info, invalid(CodeNotAPK, nil, "%s: AndroidManifest.xml has no package id", path)
	}
	// versionCode is an unsigned 32-bit attribute in the binary manifest
	// (versionCodeMajor is not read: no tool in use sets it).
	info.VersionCode = int64(uint32(m.VersionCode.MustInt32()))
	info.VersionName, _ = m.VersionName.String()
	info.MinSDK = int(m.SDK.Min.MustInt32())
	info.TargetSDK = int(m.SDK.Target.MustInt32())
	if info.MinSDK == 0 {
		info.MinSDK = 1
	}
	if info.TargetSDK == 0 {
		info.TargetSDK = info.MinSDK
	}
	info.TestOnly = m.App.TestOnly.MustBool()
	if l, err := a.MainActivity(); err == nil && l != "" {
		info.LauncherActivity = qualify(info.Package, l)
	}

	lo, hi := apilevel.V_AnyMin, apilevel.V_AnyMax
	if apiLevel > 0 {
		lo, hi = int32(apiLevel), int32(apiLevel)
	}
	res, err := apkverifier.VerifyWithSdkVersion(path, nil, lo, hi)
	// err first: on failure SignerCerts may hold unverified certificates.
	if err != nil {
		return info, invalid(CodeBadSignature, err, "%s: signature does not verify%s", path, atLevel(apiLevel))
	}
	certs := signerCerts(res, apiLevel)
	if len(certs) == 0 {
		return info, invalid(CodeBadSignature, nil, "%s: no signer certificate%s", path, atLevel(apiLevel))
	}
	info.SigningScheme = res.SigningSchemeId
	for _, c := range certs {
		info.SignerSHA256 = append(info.SignerSHA256, CertSHA256(c))
	}
	return info, nil
}

// signerCerts returns the first certificate of each signer that applies at apiLevel.
func signerCerts(res apkverifier.Result, apiLevel int) []*x509.Certificate {
	if apiLevel > 0 && apiLevel < int(apilevel.V9_0_Pie) && res.SigningSchemeId == 3 &&
		res.SigningBlockResult != nil && res.SigningBlockResult.SigningLineage != nil &&
		len(res.SigningBlockResult.SigningLineage.Nodes) > 0 {
		// Pre-P devices ignore v3 and read the v2/v1 signature, made with the
		// lineage's original key.
		if c := res.SigningBlockResult.SigningLineage.Nodes[0].SigningCert; c != nil {
			return []*x509.Certificate{c}
		}
	}
	var out []*x509.Certificate
	for _, chain := range res.SignerCerts {
		if len(chain) > 0 && chain[0] != nil {
			out = append(out, chain[0])
		}
	}
	return out
}

// CertSHA256 is the lowercase hex SHA-256 of a certificate's DER encoding.
func CertSHA256(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// NormalizeDigest lowercases a SHA-256 hex digest and drops ':' separators and
// spaces (keytool prints "AB:12:…"); ok is false when the result is not 64 hex digits.
func NormalizeDigest(s string) (string, bool) {
	s = strings.ToLower(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimSpace(s)))
	if len(s) != 64 {
		return s, false
	}
	if _, err := hex.DecodeString(s); err != nil {
		return s, false
	}
	return s, true
}

// SameSigners reports whether two signer digest sets are equal (order ignored).
func SameSigners(a, b []string) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[strings.ToLower(s)]++
	}
	for _, s := range b {
		k := strings.ToLower(s)
		if seen[k] == 0 {
			return false
		}
		seen[k]--
	}
	return true
}

func qualify(pkg, cls string) string {
	if strings.HasPrefix(cls, ".") {
		return pkg + cls
	}
	if !strings.Contains(cls, ".") {
		return pkg + "." + cls
	}
	return cls
}

func atLevel(apiLevel int) string {
	if apiLevel > 0 {
		return fmt.Sprintf(" at API level %d", apiLevel)
	}
	return ""
}

func invalid(code string, cause error, format string, args ...any) error {
	e := agent.Wrap(agent.ErrArtifactUnavailable, cause, format, args...)
	e.Code, e.Retryable = code, false
	if cause == nil {
		e.Err = nil
	}
	return e
}

// IsInvalidAPK reports whether err says the bytes are not a usable APK.
func IsInvalidAPK(err error) bool {
	var e *agent.Error
	return errors.As(err, &e) && e.ID == agent.ErrArtifactUnavailable && (e.Code == CodeNotAPK || e.Code == CodeBadSignature || e.Code == CodeEntryTooLarge)
}
