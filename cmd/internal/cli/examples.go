package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/examples"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// ExampleFiles are the files WriteExamples writes, in order.
var ExampleFiles = []string{"run.json", "policy-v2.yaml", "demo-v1.apk", "demo-v2.apk"}

// WriteExamples writes the walkthrough's inputs embedded in the binary into
// dir (created when missing): run.json (its apkStorageObjectReference the
// file:// URL of dir/demo-v2.apk, absolute), policy-v2.yaml, and the signed
// demo APKs demo-v1.apk and demo-v2.apk (package com.example.app,
// versionCode 1 and 2); each path written is printed to w, a line each.
// Each file is written whole or not at all (renamed into place). Errors:
// invalid_request_error when a file exists and not force; process_error
// when a file cannot be written.
func WriteExamples(dir string, force bool, w io.Writer) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "examples: %s", dir)
	}
	dir = abs
	if !force {
		for _, f := range ExampleFiles {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				return agent.Errorf(agent.ErrInvalidRequest, "examples: %s exists (pass --force to replace it)", filepath.Join(dir, f))
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return agent.Wrap(agent.ErrProcess, err, "examples: create %s", dir)
	}
	apkURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(dir, "demo-v2.apk"))}).String()
	quoted, _ := json.Marshal(apkURL)
	run := bytes.Replace(examples.RunJSON, []byte(`"`+examples.APKPlaceholder+`"`), quoted, 1)
	contents := map[string][]byte{"run.json": run, "policy-v2.yaml": examples.PolicyV2}
	for _, f := range ExampleFiles[2:] {
		b, err := fixtures.APK(f)
		if err != nil {
			return agent.Wrap(agent.ErrProcess, err, "examples: %s is not in this binary", f)
		}
		contents[f] = b
	}
	for _, f := range ExampleFiles {
		if err := writeFileAtomic(filepath.Join(dir, f), contents[f]); err != nil {
			return agent.Wrap(agent.ErrProcess, err, "examples: write %s", filepath.Join(dir, f))
		}
		fmt.Fprintln(w, filepath.Join(dir, f))
	}
	return nil
}

// writeFileAtomic writes b to p through a temporary file renamed into place,
// so an interrupted write never leaves a half file under p's name.
func writeFileAtomic(p string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}
